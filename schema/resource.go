package schema

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The resource types baton knows. Operations act on the first four;
// "repo" is what features such as the merge queue take leases on.
const (
	ResourcePullRequest = "pull_request"
	ResourceIssue       = "issue"
	ResourceRef         = "ref"
	ResourceCommit      = "commit"
	ResourceRepo        = "repo"
)

// Target is a parsed resource id: the repository it belongs to and the
// thing inside it.
type Target struct {
	Owner  string
	Repo   string
	Number int    // pull_request, issue
	Ref    string // ref: "heads/main"
	SHA    string // commit
}

// FullName is "owner/repo".
func (t Target) FullName() string { return t.Owner + "/" + t.Repo }

var (
	// GitHub logins: letters, digits and hyphens, at most 39; underscores
	// appear in managed-user logins.
	ownerRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,38}$`)
	repoRe  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	shaRe   = regexp.MustCompile(`^(?:[0-9a-f]{40}|[0-9a-f]{64})$`)
)

// ValidSHA reports whether s is a full lower-case hex commit id (SHA-1 or
// SHA-256).
func ValidSHA(s string) bool { return shaRe.MatchString(s) }

// ParseResource checks that r is well-formed for its type and returns what
// it names.
func ParseResource(r Resource) (Target, error) {
	switch r.Type {
	case ResourcePullRequest, ResourceIssue:
		repo, num, ok := strings.Cut(r.ID, "#")
		if !ok {
			return Target{}, Invalidf("resource.id for %s must look like owner/repo#number", r.Type)
		}
		t, err := parseRepo(repo)
		if err != nil {
			return Target{}, err
		}
		n, err := parseNumber(num)
		if err != nil {
			return Target{}, err
		}
		t.Number = n
		return t, nil
	case ResourceRef:
		repo, ref, ok := strings.Cut(r.ID, ":")
		if !ok {
			return Target{}, Invalidf("resource.id for ref must look like owner/repo:heads/branch")
		}
		t, err := parseRepo(repo)
		if err != nil {
			return Target{}, err
		}
		if err := validRefName(ref); err != nil {
			return Target{}, err
		}
		t.Ref = ref
		return t, nil
	case ResourceCommit:
		repo, sha, ok := strings.Cut(r.ID, "@")
		if !ok {
			return Target{}, Invalidf("resource.id for commit must look like owner/repo@sha")
		}
		t, err := parseRepo(repo)
		if err != nil {
			return Target{}, err
		}
		if !ValidSHA(sha) {
			return Target{}, Invalidf("resource.id: commit sha must be 40 (or 64) lower-case hex characters")
		}
		t.SHA = sha
		return t, nil
	case ResourceRepo:
		return parseRepo(r.ID)
	case "":
		return Target{}, Invalidf("resource.type is required")
	}
	return Target{}, Invalidf("resource.type %q is not one of pull_request, issue, ref, commit, repo", r.Type)
}

// ParseResourceKey splits a lease key "{type}:{id}" into its resource and
// checks it.
func ParseResourceKey(key string) (Resource, Target, error) {
	typ, id, ok := strings.Cut(key, ":")
	if !ok || typ == "" || id == "" {
		return Resource{}, Target{}, Invalidf("resource key must look like type:id, e.g. issue:octo/app#1")
	}
	r := Resource{Type: typ, ID: id}
	t, err := ParseResource(r)
	if err != nil {
		return Resource{}, Target{}, err
	}
	return r, t, nil
}

func parseRepo(s string) (Target, error) {
	owner, name, ok := strings.Cut(s, "/")
	if !ok || !ownerRe.MatchString(owner) || !repoRe.MatchString(name) || name == "." || name == ".." {
		return Target{}, Invalidf("resource.id: %q is not a repository (owner/name)", truncate(s, 80))
	}
	return Target{Owner: owner, Repo: name}, nil
}

func parseNumber(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > 1<<31-1 || strconv.Itoa(n) != s {
		return 0, Invalidf("resource.id: %q is not an issue or pull request number", truncate(s, 20))
	}
	return n, nil
}

// validRefName follows git check-ref-format for the refs baton updates:
// "heads/<branch>" or "tags/<tag>".
func validRefName(ref string) error {
	rest, ok := strings.CutPrefix(ref, "heads/")
	if !ok {
		rest, ok = strings.CutPrefix(ref, "tags/")
	}
	if !ok || rest == "" {
		return Invalidf("resource.id: ref must start with heads/ or tags/")
	}
	if len(ref) > 255 {
		return Invalidf("resource.id: ref longer than 255 characters")
	}
	bad := rest[0] == '/' || rest[len(rest)-1] == '/' || rest[len(rest)-1] == '.' ||
		strings.Contains(rest, "..") || strings.Contains(rest, "//") ||
		strings.Contains(rest, "@{") || strings.HasSuffix(rest, ".lock") || rest == "@"
	for _, c := range rest {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			bad = true
		}
	}
	for _, part := range strings.Split(rest, "/") {
		if strings.HasPrefix(part, ".") {
			bad = true
		}
	}
	if bad {
		return Invalidf("resource.id: %q is not a valid git ref name", truncate(ref, 80))
	}
	return nil
}

// truncate shortens s to at most n runes for error messages.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return fmt.Sprintf("%s…", string(r[:n]))
}

package schema

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
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
// thing inside it. Owner and Repo are in lower case (see
// CanonicalResource); Ref keeps its case.
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
// it names, with the repository's owner and name in lower case.
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

// CanonicalResource checks r like ParseResource and returns it in
// canonical form, with what it names. GitHub's owner and repository names
// are case-insensitive, so the canonical id has them in lower case:
// "issue:Octo/Demo#11" and "issue:octo/demo#11" are one resource, with one
// lease key and one place in the order of its operations. The rest of the
// id keeps its case: git ref names are case-sensitive, and numbers and
// commit ids have one form already.
//
// Every resource baton stores or takes a lease on goes through here:
// executor.NewRecord before the idempotency hash, and the lease routes
// through ParseResourceKey.
func CanonicalResource(r Resource) (Resource, Target, error) {
	t, err := ParseResource(r)
	if err != nil {
		return Resource{}, Target{}, err
	}
	id := t.FullName()
	switch r.Type {
	case ResourcePullRequest, ResourceIssue:
		id += "#" + strconv.Itoa(t.Number)
	case ResourceRef:
		id += ":" + t.Ref
	case ResourceCommit:
		id += "@" + t.SHA
	}
	return Resource{Type: r.Type, ID: id}, t, nil
}

// ParseResourceKey splits a lease key "{type}:{id}" into its resource, in
// canonical form (see CanonicalResource), and checks it.
func ParseResourceKey(key string) (Resource, Target, error) {
	typ, id, ok := strings.Cut(key, ":")
	if !ok || typ == "" || id == "" {
		return Resource{}, Target{}, Invalidf("resource key must look like type:id, e.g. issue:octo/app#1")
	}
	return CanonicalResource(Resource{Type: typ, ID: id})
}

// ValidRepository reports whether owner and name can name a GitHub
// repository: GitHub's rules for account and repository names, loosely
// (an owner may hold '_', as the accounts of Enterprise Managed Users do).
// It is what must be refused before GitHub is asked.
func ValidRepository(owner, name string) bool {
	return ownerRe.MatchString(owner) && repoRe.MatchString(name) && name != "." && name != ".."
}

// parseRepo checks "owner/name" and returns both in lower case.
func parseRepo(s string) (Target, error) {
	owner, name, ok := strings.Cut(s, "/")
	if !ok || !ValidRepository(owner, name) {
		return Target{}, Invalidf("resource.id: %q is not a repository (owner/name)", truncate(s, 80))
	}
	// The patterns admit ASCII only, so this lower-casing is the whole of
	// GitHub's case folding of these names.
	return Target{Owner: strings.ToLower(owner), Repo: strings.ToLower(name)}, nil
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
	if !utf8.ValidString(ref) {
		// Over HTTP the strict decoder refuses such a string first; this
		// catches callers in the process (webhook rules, the merge queue).
		return Invalidf("resource.id: a ref name must be valid UTF-8")
	}
	bad := rest[0] == '/' || rest[len(rest)-1] == '/' || rest[len(rest)-1] == '.' ||
		strings.Contains(rest, "..") || strings.Contains(rest, "//") ||
		strings.Contains(rest, "@{") || rest == "@"
	for _, c := range rest {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			bad = true
		}
	}
	for _, part := range strings.Split(rest, "/") {
		// No part begins with a dot or ends with ".lock".
		if strings.HasPrefix(part, ".") || strings.HasSuffix(part, ".lock") {
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

package ghsim

import (
	"bytes"
	"html/template"
	"net/http"
	"strconv"
	"strings"
)

// The simulator's web pages: what the html_url of an issue, a pull request
// or a comment opens. On GitHub those are github.com's pages; here they are
// plain pages of the simulator's state, so that a link baton reports (the
// url of a comment it posted, say) shows what baton did instead of a 404.
// They show what the admin API's GET routes return, read-only, without
// authentication, as a public repository's pages are.

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Repo}}#{{.Number}}: {{.Title}}</title>
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:50rem;margin:2rem auto;padding:0 1rem}
.meta{color:#57606a}.comment{border:1px solid #d0d7de;border-radius:6px;margin:1rem 0}
.comment header{background:#f6f8fa;padding:.4rem .8rem;border-bottom:1px solid #d0d7de}
.comment pre{margin:0;padding:.8rem;white-space:pre-wrap;font:inherit}.comment:target{border-color:#0969da}</style>
</head><body>
<p class="meta">GitHub simulator · {{.Repo}}</p>
<h1>{{.Title}} <span class="meta">#{{.Number}}</span></h1>
<p class="meta">{{.Kind}} · {{.State}}{{range .Facts}} · {{.}}{{end}}</p>
{{if .Labels}}<p>Labels: {{range $i, $l := .Labels}}{{if $i}}, {{end}}<code>{{$l}}</code>{{end}}</p>{{end}}
{{range .Comments}}<section class="comment" id="issuecomment-{{.ID}}"><header><b>{{.User}}</b> commented {{.Posted}}</header><pre>{{.Body}}</pre></section>
{{else}}<p class="meta">No comments.</p>{{end}}
</body></html>
`))

type page struct {
	Repo, Kind, Title, State string
	Number                   int
	Facts, Labels            []string
	Comments                 []CommentInfo
}

// servePage answers GET (or HEAD) /{owner}/{repo}/issues/{n} and
// /{owner}/{repo}/pull/{n}, and reports whether the path was one of them.
// They are matched here rather than on the REST mux, where
// /{owner}/{repo}/issues/{n} would overlap the /repos/... routes.
func (s *Sim) servePage(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) != 4 || parts[0] == "repos" || (parts[2] != "issues" && parts[2] != "pull") {
		return false
	}
	n, err := strconv.Atoi(parts[3])
	if err != nil || n <= 0 || parts[3] != strconv.Itoa(n) {
		return false
	}
	owner, name := parts[0], parts[1]
	var p page
	if parts[2] == "pull" {
		pr, err := s.Pull(owner, name, n)
		if err != nil {
			return false
		}
		p = page{Kind: "Pull request", Title: pr.Title, State: pr.State, Number: n, Labels: pr.Labels, Comments: pr.Comments,
			Facts: []string{pr.Head + " into " + pr.Base, "head " + shortSHA(pr.HeadSHA)}}
		if pr.Merged {
			p.State = "merged"
			p.Facts = append(p.Facts, "merged by "+pr.MergedBy+" as "+shortSHA(pr.MergeCommitSHA))
		}
	} else {
		is, err := s.Issue(owner, name, n)
		if err != nil {
			return false
		}
		if is.IsPull {
			http.Redirect(w, r, "/"+owner+"/"+name+"/pull/"+parts[3], http.StatusFound)
			return true
		}
		p = page{Kind: "Issue", Title: is.Title, State: is.State, Number: n, Labels: is.Labels, Comments: is.Comments}
	}
	if rp, err := s.lookupRepo(owner, name); err == nil {
		p.Repo = rp.fullName
	}
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, p); err != nil {
		return false
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(b.Bytes())
	}
	return true
}

func shortSHA(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

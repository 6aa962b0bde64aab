//go:build ignore

// Command trim cuts GitHub's published OpenAPI description down to the
// operations the simulator serves and the webhook payloads it sends, so that
// the simulator's tests can validate every response and delivery offline.
//
// The description comes from the npm package @octokit/openapi (MIT licence,
// copied beside the output as LICENSE.octokit-openapi):
//
//	tmp=$(mktemp -d)
//	(cd "$tmp" && npm pack @octokit/openapi@23.0.2 && tar xzf octokit-openapi-*.tgz)
//	go run app/ghsim/testdata/trim/main.go -in "$tmp/package/generated/api.github.com.json" \
//	    -out app/ghsim/testdata/api.github.com.trimmed.json
//
// The copy in testdata was cut from version 23.0.2.
//
// The output keeps the selected operations (only the listed methods), every
// component they reference (transitively), and the component schemas of the
// listed webhook payloads (named in x-ghsim-webhooks: webhook name → schema
// reference); examples are dropped.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
)

// operations are the REST operations the simulator serves: "METHOD path".
var operations = []string{
	"GET /app",
	"GET /app/installations",
	"GET /app/installations/{installation_id}",
	"POST /app/installations/{installation_id}/access_tokens",
	"GET /installation/repositories",
	"GET /rate_limit",
	"GET /repos/{owner}/{repo}",
	"GET /repos/{owner}/{repo}/pulls",
	"GET /repos/{owner}/{repo}/pulls/{pull_number}",
	"GET /repos/{owner}/{repo}/pulls/{pull_number}/merge",
	"PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge",
	"PUT /repos/{owner}/{repo}/pulls/{pull_number}/update-branch",
	"GET /repos/{owner}/{repo}/issues/{issue_number}",
	"GET /repos/{owner}/{repo}/issues/{issue_number}/comments",
	"POST /repos/{owner}/{repo}/issues/{issue_number}/comments",
	"GET /repos/{owner}/{repo}/issues/{issue_number}/labels",
	"POST /repos/{owner}/{repo}/issues/{issue_number}/labels",
	"DELETE /repos/{owner}/{repo}/issues/{issue_number}/labels/{name}",
	"GET /repos/{owner}/{repo}/git/ref/{ref}",
	"GET /repos/{owner}/{repo}/git/commits/{commit_sha}",
	"PATCH /repos/{owner}/{repo}/git/refs/{ref}",
	"DELETE /repos/{owner}/{repo}/git/refs/{ref}",
	"POST /repos/{owner}/{repo}/git/refs",
	"POST /repos/{owner}/{repo}/statuses/{sha}",
	"GET /repos/{owner}/{repo}/commits/{ref}/status",
	"GET /repos/{owner}/{repo}/commits/{ref}/statuses",
	"GET /repos/{owner}/{repo}/commits/{ref}/check-runs",
	"GET /repos/{owner}/{repo}/commits/{ref}/check-suites",
	"GET /repos/{owner}/{repo}/branches/{branch}/protection/required_status_checks",
	"GET /repos/{owner}/{repo}/collaborators/{username}/permission",
	"GET /app/hook/deliveries",
	"GET /app/hook/deliveries/{delivery_id}",
	"POST /app/hook/deliveries/{delivery_id}/attempts",
	"POST /app-manifests/{code}/conversions",
}

// webhooks are the x-webhooks entries whose payload schemas are kept.
var webhooks = []string{
	"check-run-completed",
	"check-suite-completed",
	"installation-created",
	"installation-deleted",
	"installation-suspend",
	"installation-unsuspend",
	"installation-repositories-added",
	"installation-repositories-removed",
	"issue-comment-created",
	"issues-labeled",
	"issues-opened",
	"issues-unlabeled",
	"pull-request-closed",
	"pull-request-labeled",
	"pull-request-opened",
	"pull-request-reopened",
	"pull-request-synchronize",
	"pull-request-unlabeled",
	"push",
	"status",
}

func main() {
	in := flag.String("in", "", "path of generated/api.github.com.json from @octokit/openapi")
	out := flag.String("out", "app/ghsim/testdata/api.github.com.trimmed.json", "output path")
	flag.Parse()
	if *in == "" {
		log.Fatal("trim: -in is required")
	}
	raw, err := os.ReadFile(*in)
	if err != nil {
		log.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		log.Fatal(err)
	}
	trimmed, err := trim(doc)
	if err != nil {
		log.Fatal(err)
	}
	b, err := json.Marshal(trimmed)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "trim: wrote %s (%d bytes)\n", *out, len(b)+1)
}

func trim(doc map[string]any) (map[string]any, error) {
	paths, _ := doc["paths"].(map[string]any)
	components, _ := doc["components"].(map[string]any)
	hooks, _ := doc["x-webhooks"].(map[string]any)

	outPaths := map[string]any{}
	for _, op := range operations {
		method, path, _ := strings.Cut(op, " ")
		item, ok := paths[path].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("path %s not in the description", path)
		}
		operation, ok := item[strings.ToLower(method)]
		if !ok {
			return nil, fmt.Errorf("operation %s not in the description", op)
		}
		kept, _ := outPaths[path].(map[string]any)
		if kept == nil {
			kept = map[string]any{}
			if params, ok := item["parameters"]; ok {
				kept["parameters"] = params
			}
			outPaths[path] = kept
		}
		kept[strings.ToLower(method)] = operation
	}

	outComponents := map[string]map[string]any{}
	var queue []string
	hookSchemas := map[string]any{}
	for _, name := range webhooks {
		hook, ok := hooks[name].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("webhook %s not in the description", name)
		}
		ref, ok := dig(hook, "post", "requestBody", "content", "application/json", "schema", "$ref").(string)
		if !ok {
			return nil, fmt.Errorf("webhook %s has no payload schema reference", name)
		}
		hookSchemas[name] = ref
		queue = append(queue, ref)
	}
	for path, item := range outPaths {
		outPaths[path] = stripExamples(item)
		queue = append(queue, collectRefs(outPaths[path])...)
	}
	for len(queue) > 0 {
		ref := queue[0]
		queue = queue[1:]
		kind, name, ok := parseRef(ref)
		if !ok {
			return nil, fmt.Errorf("unsupported reference %q", ref)
		}
		if _, done := outComponents[kind][name]; done {
			continue
		}
		section, _ := components[kind].(map[string]any)
		value, ok := section[name]
		if !ok {
			return nil, fmt.Errorf("reference %q does not resolve", ref)
		}
		value = stripExamples(value)
		if outComponents[kind] == nil {
			outComponents[kind] = map[string]any{}
		}
		outComponents[kind][name] = value
		queue = append(queue, collectRefs(value)...)
	}

	comps := map[string]any{}
	for kind, entries := range outComponents {
		comps[kind] = entries
	}
	return map[string]any{
		"openapi": doc["openapi"],
		"info": map[string]any{
			"title":       "GitHub v3 REST API (trimmed for the baton simulator's tests)",
			"version":     infoVersion(doc),
			"description": "Cut from @octokit/openapi generated/api.github.com.json by app/ghsim/testdata/trim; MIT licence in LICENSE.octokit-openapi.",
		},
		"servers":          doc["servers"],
		"paths":            outPaths,
		"components":       comps,
		"x-ghsim-webhooks": hookSchemas,
	}, nil
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func infoVersion(doc map[string]any) any {
	info, _ := doc["info"].(map[string]any)
	return info["version"]
}

// stripExamples removes example values, which validation does not need.
func stripExamples(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			if k == "examples" || k == "example" {
				continue
			}
			out[k] = stripExamples(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = stripExamples(e)
		}
		return out
	default:
		return v
	}
}

func collectRefs(v any) []string {
	var refs []string
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			if r, ok := t["$ref"].(string); ok {
				refs = append(refs, r)
			}
			for _, e := range t {
				walk(e)
			}
		case []any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	walk(v)
	return refs
}

func parseRef(ref string) (kind, name string, ok bool) {
	rest, ok := strings.CutPrefix(ref, "#/components/")
	if !ok {
		return "", "", false
	}
	kind, name, ok = strings.Cut(rest, "/")
	return kind, name, ok && !strings.Contains(name, "/")
}

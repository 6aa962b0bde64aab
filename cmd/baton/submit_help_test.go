package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// submit --help lists every action with its payload's fields, the same
// fields, optional ones marked, as the API's description (app/openapi.json,
// itself checked against the payloads by the schema package's tests).
func TestSubmitHelpListsEveryPayloadField(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "app", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	api := map[string]string{}
	for _, m := range regexp.MustCompile(`(github\.[a-z_.]+) \{([^}]*)\}`).FindAllStringSubmatch(string(doc), -1) {
		if _, ok := api[m[1]]; !ok {
			api[m[1]] = m[2]
		}
	}
	help := map[string]string{}
	line := regexp.MustCompile(`(?m)^  (github\.[a-z_.]+) +\S+ +\{(.*)\}$`)
	for _, m := range line.FindAllStringSubmatch(newSubmitCmd().Long, -1) {
		fields := strings.ReplaceAll(m[2], `: [...]`, "")
		help[m[1]] = strings.ReplaceAll(fields, `"`, "")
	}
	if len(api) < 7 {
		t.Fatalf("found %d actions in app/openapi.json", len(api))
	}
	for action, want := range api {
		if got, ok := help[action]; !ok {
			t.Errorf("submit --help does not list %s", action)
		} else if got != want {
			t.Errorf("submit --help gives %s the payload {%s}; the API's is {%s}", action, got, want)
		}
	}
	for action := range help {
		if _, ok := api[action]; !ok {
			t.Errorf("submit --help lists %s, which the API does not have", action)
		}
	}
}

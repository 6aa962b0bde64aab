package schema

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// app/openapi.json describes each action's payload as "ACTION {field,
// optional?, ...}": the fields are the payload struct's, in its order,
// marked optional where the struct leaves them out when empty. A field
// added to a payload cannot go undocumented.
func TestOpenAPIPayloadFieldsAreTheActions(t *testing.T) {
	doc, err := os.ReadFile("../app/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ActionNames() {
		typ := reflect.TypeOf(Actions[name].newPayload()).Elem()
		var fields []string
		for i := range typ.NumField() {
			tag := typ.Field(i).Tag.Get("json")
			field, opts, _ := strings.Cut(tag, ",")
			if field == "" || field == "-" {
				continue
			}
			if strings.Contains(opts, "omitempty") {
				field += "?"
			}
			fields = append(fields, field)
		}
		want := name + " {" + strings.Join(fields, ", ") + "}"
		m := regexp.MustCompile(regexp.QuoteMeta(name) + ` \{[^}]*\}`).FindString(string(doc))
		if m != want {
			t.Errorf("app/openapi.json describes the payload as %q, want %q", m, want)
		}
	}
}

package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The examples of RFC 8785 and its reference implementation's test data
// (testdata/jcs, Apache-2.0, see LICENSE there): every input must
// canonicalize to exactly the expected output.
func TestCanonicalRFC8785Vectors(t *testing.T) {
	t.Parallel()
	inputs, err := filepath.Glob("testdata/jcs/input/*.json")
	if err != nil || len(inputs) < 8 {
		t.Fatalf("test vectors missing: %v (%d files)", err, len(inputs))
	}
	for _, in := range inputs {
		name := filepath.Base(in)
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("testdata/jcs/output", name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Canonical(raw)
			if err != nil {
				t.Fatalf("Canonical: %v", err)
			}
			if string(got) != string(want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

func TestCanonicalCases(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		// RFC 8785 §3.2.2 number examples.
		{`[1E30, 4.50, 2e-3, 0.000000000000000000000000001, -0]`, `[1e+30,4.5,0.002,1e-27,0]`},
		{`{"b":1,"a":{"d":[3,{"z":1,"y":2}],"c":null}}`, `{"a":{"c":null,"d":[3,{"y":2,"z":1}]},"b":1}`},
		{"{ \"é\" : \"\\u00e9\\n\\u0001\" }", "{\"é\":\"é\\n\\u0001\"}"},
		{`"\ud83d\ude00"`, `"😀"`},
		{`{"\u20ac":1,"\r":2,"1":3}`, "{\"\\r\":2,\"1\":3,\"€\":1}"},
	}
	for _, c := range cases {
		got, err := Canonical([]byte(c.in))
		if err != nil {
			t.Errorf("Canonical(%s): %v", c.in, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("Canonical(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestCanonicalRejectsBadJSON(t *testing.T) {
	t.Parallel()
	for _, in := range []string{``, `{`, `{"a":1,"a":2}`, `"\ud800"`, `{"a":1} x`, `NaN`, `01`, "\"\xff\""} {
		if _, err := Canonical([]byte(in)); err == nil {
			t.Errorf("Canonical(%q) accepted bad JSON", in)
		} else if ErrorCode(err) != CodeInvalidRequest {
			t.Errorf("Canonical(%q) error code = %s, want invalid_request", in, ErrorCode(err))
		}
	}
}

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2,{"c":"é"}]}`, `[1E30,-0,0.1]`, `"\u0000"`, `{"\ud83d\ude02":null}`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := Canonical(raw)
		if err != nil {
			return
		}
		// Canonical output is a fixed point.
		again, err := Canonical(out)
		if err != nil {
			t.Fatalf("canonical output %q does not parse again: %v", out, err)
		}
		if string(again) != string(out) {
			t.Fatalf("not a fixed point: %q → %q", out, again)
		}
	})
}

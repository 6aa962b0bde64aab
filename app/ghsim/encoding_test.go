package ghsim

import (
	"encoding/json"
	"testing"
)

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	raw := json.RawMessage(`{"a":1}`)
	v := map[string]any{
		"s": "x<y>&\"é\n", "n": nil, "b": true, "i": 3, "i64": int64(-4), "f": 1.5, "m": map[string]any{"z": 1, "a": []any{1, "two", nil}},
		"nilmap": map[string]any(nil), "nilslice": []any(nil), "strs": []string{"a"}, "raw": raw, "raws": []json.RawMessage{raw, raw},
		"perm": map[string]string{"k": "v"}, "empty": []any{},
	}
	got, err := appendJSON(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(v)
	if string(got) != string(want) {
		t.Errorf("appendJSON\n got %s\nwant %s", got, want)
	}
}

package mergequeue

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/schema"
)

func TestNames(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 22: "22nd", 101: "101st", 111: "111th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %s", n, got)
		}
	}
	if got := LeaseKey("Octo", "Demo"); got != "repo:octo/demo" {
		t.Errorf("LeaseKey: %s", got)
	}
	joined := time.UnixMicro(1767225600000001)
	if got := MergeKey("Octo", "Demo", 4, "abc", joined, 1); got != "merge:octo/demo#4@abc:1767225600000001" {
		t.Errorf("MergeKey: %s", got)
	}
	if got := MergeKey("Octo", "Demo", 4, "abc", joined, 2); got != "merge:octo/demo#4@abc:1767225600000001:2" {
		t.Errorf("MergeKey, second try: %s", got)
	}
	// The longest names GitHub allows, and a SHA-256 head, still make a
	// valid idempotency key.
	if got := MergeKey(strings.Repeat("o", 39), strings.Repeat("r", 100), 1<<31-1, strings.Repeat("f", 64), joined, mergeTries); len(got) > schema.MaxIdempotencyKeyChars {
		t.Errorf("MergeKey of %d characters", len(got))
	}
	short := opKey("delivery:1234", "status", "#4@abc", "2")
	if short != "delivery:1234:mergequeue:status:#4@abc:2" {
		t.Errorf("opKey: %s", short)
	}
	long := opKey("delivery:1234", "status", "#4@"+strings.Repeat("a", 300), "2")
	if len(long) > 255 || long != opKey("delivery:1234", "status", "#4@"+strings.Repeat("a", 300), "2") ||
		long == opKey("delivery:1234", "status", "#4@"+strings.Repeat("a", 300), "3") || !strings.HasPrefix(long, "delivery:1234:mergequeue:sha256:") {
		t.Errorf("long opKey: %s", long)
	}
	for in, want := range map[string]string{"héllo wörld": "hé…", "hé": "hé", "éééé": "é…"} {
		if got := truncate(in, 6); got != want {
			t.Errorf("truncate(%q, 6) = %q, want %q", in, got, want)
		}
	}
}

// The audit detail of a cancelled merge names the sha it was for when
// asked to, in both of its wordings.
func TestMergeFateDetail(t *testing.T) {
	sha := "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		fate     mergeFate
		sha, out string
	}{
		{mergeNone, sha, ""},
		{mergeDone, sha, ""},
		{mergeCancelled, "", "; its merge was cancelled"},
		{mergeCancelled, sha, "; its merge at 0123456 was cancelled"},
		{mergeCancelRequested, "", "; its running merge was asked to stop"},
		{mergeCancelRequested, sha, "; its running merge at 0123456 was asked to stop"},
	} {
		if got := tc.fate.detailAt(tc.sha); got != tc.out {
			t.Errorf("fate %d at %q: %q, want %q", tc.fate, tc.sha, got, tc.out)
		}
	}
	if mergeCancelRequested.detail() != mergeCancelRequested.detailAt("") {
		t.Error("detail is not detailAt without a sha")
	}
}

func TestCodeSpan(t *testing.T) {
	for in, want := range map[string]string{
		"ci (failure)":            "`ci (failure)`",
		"a `b` c":                 "``a `b` c``",
		"x ``y`` z":               "```x ``y`` z```",
		"`lead":                   "`` `lead ``",
		"trail`":                  "`` trail` ``",
		"two\nlines\r\nand\rmore": "`two lines and more`",
	} {
		if got := codeSpan(in); got != want {
			t.Errorf("codeSpan(%q) = %q, want %q", in, got, want)
		}
	}
}

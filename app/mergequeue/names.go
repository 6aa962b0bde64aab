package mergequeue

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/baton-dev/baton/schema"
)

func splitFullName(full string) (owner, name string, ok bool) {
	owner, name, ok = strings.Cut(full, "/")
	if !ok || !schema.ValidRepository(owner, name) {
		return "", "", false
	}
	return owner, name, true
}

// nameKey is the key of a repository's state: its full name in lower case,
// as GitHub's names are case-insensitive.
func nameKey(owner, name string) string { return strings.ToLower(owner + "/" + name) }

// LeaseKey is the repository lease every change to a repository's queue is
// made under: "repo:<owner>/<name>", lower-cased.
func LeaseKey(owner, name string) string { return "repo:" + nameKey(owner, name) }

// MergeKey is the idempotency key of a merge of pull request n at sha:
// "merge:<owner>/<name>#<n>@<sha>:<joined>", where joined is when the pull
// request joined the queue (its entry's queuedAt, in Unix microseconds),
// and ":<try>" is appended from the second try on (a try replaces one
// whose attempts ran out on errors GitHub may not repeat). The repository
// is lower-cased so that every path to the merge names the same
// operation: one join, at one head, is one merge, whoever asks; a later
// join at the same head is a new one.
func MergeKey(owner, name string, n int, sha string, joined time.Time, try int) string {
	k := "merge:" + nameKey(owner, name) + "#" + strconv.Itoa(n) + "@" + sha + ":" + strconv.FormatInt(joined.UnixMicro(), 10)
	if try > 1 {
		k += ":" + strconv.Itoa(try)
	}
	return k
}

// bounceKey is the idempotency key of the comment that says why pull
// request n, in the queue since joined, bounced at sha:
// "mergequeue:bounce:<owner>/<name>#<n>@<sha>:<joined>". Whichever trigger
// bounces it, one join at one head gets one comment.
func bounceKey(owner, name string, n int, sha string, joined time.Time) string {
	k := "mergequeue:bounce:" + nameKey(owner, name) + "#" + strconv.Itoa(n) + "@" + sha + ":" + strconv.FormatInt(joined.UnixMicro(), 10)
	if len(k) <= schema.MaxIdempotencyKeyChars {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "mergequeue:bounce:sha256:" + hex.EncodeToString(sum[:])
}

// refusalKey is the idempotency key of the reply that refuses command
// ("queue" or "dequeue") of user on pull request n:
// "mergequeue:refused:<owner>/<name>#<n>:<command>:<user>". A commenter
// is told once per pull request and command, however often they comment.
func refusalKey(owner, name string, n int, command, user string) string {
	return schema.DerivedKey("mergequeue:refused", nameKey(owner, name)+"#"+strconv.Itoa(n), command, user)
}

// opKey derives the idempotency key of a piece of work done for one
// trigger: "<trigger>:mergequeue:<part>:<part>…" (schema.DerivedKey). A
// trigger is a webhook delivery ("delivery:<guid>", the form
// app.DeliveryKey uses), a reconcile run or a finished operation, so
// running the same trigger again (after a retry or a crash) finds the
// operations it already created. Keys longer than an idempotency key may
// be end with the SHA-256 of their parts. Every caller gives parts.
func opKey(trigger string, parts ...string) string {
	return schema.DerivedKey(trigger+":mergequeue", parts...)
}

// ordinal writes n as "1st", "2nd", "3rd", "4th", "11th", "21st"…
func ordinal(n int) string {
	s := strconv.Itoa(n)
	if n%100 >= 11 && n%100 <= 13 {
		return s + "th"
	}
	switch n % 10 {
	case 1:
		return s + "st"
	case 2:
		return s + "nd"
	case 3:
		return s + "rd"
	}
	return s + "th"
}

func shortSHA(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// codeSpan writes s as a Markdown code span, on one line: GitHub renders
// no mention, link, image or HTML in it. The fence is longer than any run
// of backticks in s.
func codeSpan(s string) string {
	s = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ").Replace(s)
	longest, run := 0, 0
	for i := range len(s) {
		if s[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + s + fence
}

package app

import (
	"fmt"
	"testing"
)

// An answer read before the registry changed is not kept, one read after
// is; the map is emptied at its bound instead of growing.
func TestRepoCache(t *testing.T) {
	var c repoCache
	gen := c.gen.Load()
	c.invalidate() // a change commits while a lookup is reading
	c.put("octo/demo", repoAnswer{id: 1}, gen)
	if _, ok := c.get("octo/demo"); ok {
		t.Fatal("an answer read before the change was kept")
	}
	gen = c.gen.Load()
	c.put("octo/demo", repoAnswer{id: 1}, gen)
	if a, ok := c.get("octo/demo"); !ok || a.id != 1 {
		t.Fatalf("get = %+v, %v; want installation 1", a, ok)
	}
	c.invalidate()
	if _, ok := c.get("octo/demo"); ok {
		t.Fatal("an answer survived a change")
	}
	c.put("octo/demo", repoAnswer{id: 1}, c.gen.Load())
	for i := range repoCacheSize {
		c.put(fmt.Sprintf("o/r%d", i), repoAnswer{missing: true}, c.gen.Load())
	}
	if n := len(c.m); n > repoCacheSize {
		t.Fatalf("%d answers kept, bound %d", n, repoCacheSize)
	}
	if _, ok := c.get("octo/demo"); ok {
		t.Error("the map was not emptied at its bound")
	}
}

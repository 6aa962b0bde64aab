package app

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds Debian's chromium. Without it the browser test is
// skipped, unless CI is set (.ci/run installs it): then it fails.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed (CI is set: the setup page must be tested in a browser; apt-get install chromium)")
	}
	t.Skip("chromium is not installed: skipping the setup page's browser test (apt-get install chromium)")
	return ""
}

// The setup flow end to end in headless Chromium: the button on baton's
// /setup posts the manifest to "GitHub", which creates the App and sends
// the browser back to /setup/callback; baton exchanges the code, stores
// the credentials, says that a restart makes it run as the App (what
// Server's setup answers: ErrRestartRequired), and shows the installation
// link. The stored key then authenticates as the App.
func TestSetupFlowInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromiumPath(t)
	e := newSetupEnv(t, SetupConfig{}, ErrRestartRequired)
	ctx := hookCtx(t)

	// Chromium's helpers may still write to the profile for a moment after
	// it exits, so the directory is removed with a bounded retry rather
	// than by t.TempDir.
	profile, err := os.MkdirTemp("", "baton-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for os.RemoveAll(profile) != nil && time.Now().Before(deadline) {
			<-time.After(50 * time.Millisecond)
		}
	})
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
	)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	defer func() {
		cancelBrowser()
		_ = chromedp.Cancel(browser)
	}()

	if err := chromedp.Do(browser,
		chromedp.Navigate(e.srv.URL+"/setup"),
		chromedp.WaitVisible(chromedp.ID("create-app")),
	); err != nil {
		t.Fatalf("open /setup: %v", err)
	}
	title, err := chromedp.Run(browser, chromedp.Title())
	if err != nil || title != "Set up baton" {
		t.Errorf("title %q, %v", title, err)
	}
	if err := chromedp.Do(browser,
		chromedp.Click(chromedp.ID("create-app")),
		chromedp.WaitVisible(chromedp.ID("restart")),
	); err != nil {
		t.Fatalf("create the App: %v", err)
	}
	loc, err := chromedp.Run(browser, chromedp.Location())
	if err != nil || !strings.HasPrefix(loc, e.srv.URL+"/setup/callback?") || !strings.Contains(loc, "code=") {
		t.Errorf("landed on %q, %v", loc, err)
	}
	link, err := chromedp.Run(browser, chromedp.AttributeValue(chromedp.ID("install-link"), "href"))
	if err != nil || link.Value != e.sim.URL()+"/apps/baton/installations/new" {
		t.Errorf("installation link %+v, %v", link, err)
	}
	restart, err := chromedp.Run(browser, chromedp.Text(chromedp.ID("restart")))
	if err != nil || !strings.Contains(restart, "Restart baton to run as the App") {
		t.Errorf("restart notice %q, %v", restart, err)
	}
	running, err := chromedp.Run(browser, chromedp.Evaluate[int](`document.querySelectorAll("#running").length`))
	if err != nil || running != 0 {
		t.Errorf("the page claims baton runs as the App (%d), %v", running, err)
	}
	e.checkCredentials(ctx)

	// Back on /setup: configured, no second App offered.
	if err := chromedp.Do(browser,
		chromedp.Navigate(e.srv.URL+"/setup"),
		chromedp.WaitVisible(chromedp.ID("configured")),
	); err != nil {
		t.Fatalf("reopen /setup: %v", err)
	}
	forms, err := chromedp.Run(browser, chromedp.Evaluate[int](`document.querySelectorAll("form").length`))
	if err != nil || forms != 0 {
		t.Errorf("configured page has %d forms, %v", forms, err)
	}
	configured, err := chromedp.Run(browser, chromedp.Text(chromedp.ID("configured")))
	if err != nil || !strings.Contains(configured, "restart it") {
		t.Errorf("configured notice %q, %v", configured, err)
	}
}

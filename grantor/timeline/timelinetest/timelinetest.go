// Package timelinetest starts a headless browser for tests of the
// timeline page (grantor/timeline's and cmd/leased's).
package timelinetest

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// Browser starts headless Chromium for t, with opts besides the defaults,
// or skips t when it is not installed (fails instead under CI, which
// installs it: .ci/run). It stops on cleanup.
func Browser(t *testing.T, opts ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed (CI is set: .ci/run installs it with apt-get install chromium)")
		}
		t.Skip("chromium is not installed: apt-get install chromium")
	}
	all := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(all, opts...)...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

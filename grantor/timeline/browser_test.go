package timeline_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/grantor/timeline"
	"github.com/leased/leased/grantor/timeline/timelinetest"
)

// The page in a real browser, its event stream dropped and reconnected
// (as a proxy's timeout or a network change drops it), shows the records
// appended meanwhile: it showed none of them, nor any record after, when
// the last record it had seen was stamped ahead of the stream server's
// clock (a node's clock ahead), as the stream resumed by that stamp.
func TestPageResumesAfterADrop(t *testing.T) {
	h := openStream(t)
	th, err := timeline.New(h)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(th)
	t.Cleanup(s.Close) // after the browser's (cleanups run last first): Close waits for the page's stream to end
	ctx := timelinetest.Browser(t)
	now := time.Now().Truncate(time.Millisecond).UTC()
	rec := func(name string, token uint64, at time.Time) history.Record {
		return history.Record{Kind: history.KindGranted, Name: name, Holder: "h", Token: token, Revision: token, Time: at, GrantedAt: at}
	}
	appendAll(t, h, rec("tl.ahead", 1, now.Add(time.Minute)))
	lanes := func(want string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		js := `document.body.dataset.state === 'live' && ` + want
		if _, err := chromedp.Run(wctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
			got, _ := chromedp.Run(context.WithoutCancel(wctx), chromedp.Evaluate[[]string](
				`[...document.querySelectorAll('#timeline .lane')].map(l => l.dataset.lane)`))
			t.Fatalf("the page never showed %s: %v; its lanes: %q", want, err, got)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/?since=1h")); err != nil {
		t.Fatal(err)
	}
	lanes(`!!document.querySelector('#timeline [data-lane="tl.ahead"]')`)
	s.CloseClientConnections() // the page's event stream: it reconnects, saying the last id it saw
	appendAll(t, h, rec("tl.late", 2, now.Add(-30*time.Second)), rec("tl.now", 3, now))
	lanes(`!!document.querySelector('#timeline [data-lane="tl.late"]') && !!document.querySelector('#timeline [data-lane="tl.now"]')`)
}

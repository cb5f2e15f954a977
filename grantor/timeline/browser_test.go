package timeline_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/grantor/timeline"
	"github.com/leased/leased/grantor/timeline/timelinetest"
)

// openPage serves the timeline of a new history stream and starts a
// headless browser, whose context it returns, to look at it.
func openPage(t *testing.T) (*history.Stream, *httptest.Server, context.Context) {
	t.Helper()
	h := openStream(t)
	th, err := timeline.New(h)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(th)
	t.Cleanup(s.Close) // after the browser's (cleanups run last first): Close waits for the page's stream to end
	return h, s, timelinetest.Browser(t)
}

// The page in a real browser, its event stream dropped and reconnected
// (as a proxy's timeout or a network change drops it), shows the records
// appended meanwhile: it showed none of them, nor any record after, when
// the last record it had seen was stamped ahead of the stream server's
// clock (a node's clock ahead), as the stream resumed by that stamp.
func TestPageResumesAfterADrop(t *testing.T) {
	h, s, ctx := openPage(t)
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

// A revocation that held the lease (no grant allowed until the revoked
// holder's deadline had passed, or its release) is drawn after the
// revoked tenure's bar: the page showed the lease free while no one could
// take it. One freed early is drawn to its free; one revoked with
// free_now has none.
func TestPageDrawsARevocationsHold(t *testing.T) {
	h, s, ctx := openPage(t)
	now := time.Now().Truncate(time.Millisecond).UTC()
	var recs []history.Record
	revoked := func(name string, token uint64, hold time.Duration) {
		recs = append(recs,
			history.Record{Kind: history.KindGranted, Name: name, Holder: "h", Token: token, Revision: token,
				Time: now.Add(-20 * time.Second), GrantedAt: now.Add(-20 * time.Second)},
			history.Record{Kind: history.KindEnded, Name: name, Holder: "h", Token: token, Revision: token + 10,
				Time: now.Add(-15 * time.Second), EndedBy: history.EndRevoked, Reason: "stuck", HoldMS: hold.Milliseconds()})
	}
	revoked("tl.held", 1, 31*time.Second)
	revoked("tl.freed", 2, 31*time.Second)
	recs = append(recs, history.Record{Kind: history.KindFreed, Name: "tl.freed", Holder: "h", Token: 2, Revision: 30,
		Time: now.Add(-12 * time.Second)})
	revoked("tl.now", 3, 0)
	appendAll(t, h, recs...)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/?since=1m")); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ready := `document.body.dataset.state === 'live' && !!document.querySelector('#timeline [data-lane="tl.now"]')`
	if _, err := chromedp.Run(wctx, chromedp.Poll[bool](ready, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Fatalf("the page never showed its lanes: %v", err)
	}
	// Each lane's hold, as [width of the hold, width of the bar, its title].
	holds, err := chromedp.Run(wctx, chromedp.Evaluate[map[string][]any](`Object.fromEntries(
		[...document.querySelectorAll('#timeline .lane')].map(l => {
			const h = l.querySelector('.hold'), b = l.querySelector('.bar-body');
			return [l.dataset.lane, h ? [Number(h.getAttribute('width')), Number(b.getAttribute('width')), h.querySelector('title').textContent] : []];
		}))`))
	if err != nil {
		t.Fatal(err)
	}
	width := func(lane string) (hold, bar float64, title string) {
		if h := holds[lane]; len(h) == 3 {
			return h[0].(float64), h[1].(float64), h[2].(string)
		}
		return 0, 0, ""
	}
	// The bar is 5 s long: a hold to now is 15 s, one freed 3 s in is 3 s.
	if hold, bar, title := width("tl.held"); hold < 2.5*bar || !strings.Contains(title, "at the latest") {
		t.Errorf("the hold of tl.held: %v wide after a bar of %v, %q; want three times the bar, held on", hold, bar, title)
	}
	if hold, bar, title := width("tl.freed"); hold < 0.4*bar || hold > 0.8*bar || !strings.Contains(title, "freed early") {
		t.Errorf("the hold of tl.freed: %v wide after a bar of %v, %q; want 3/5 of the bar, freed early", hold, bar, title)
	}
	if h := holds["tl.now"]; len(h) != 0 {
		t.Errorf("a revocation with free_now drawn holding: %v", h)
	}
}

// The page draws at most its limit of tenures (the most recently active),
// and says how many the window holds: it drew every tenure of the window,
// and kept every one that came while it was open (33,000 leases took 11 s
// to draw, each redraw 0.1-0.2 s). New tenures still show, the least
// recently active making room.
func TestPageLimited(t *testing.T) {
	h, s, ctx := openPage(t)
	now := time.Now().Truncate(time.Millisecond).UTC()
	grant := func(i int, at time.Time) history.Record {
		return history.Record{Kind: history.KindGranted, Name: fmt.Sprintf("lim.%03d", i), Holder: "h", Token: uint64(i + 1),
			Revision: uint64(i + 1), Time: at, GrantedAt: at}
	}
	const leases, limit = 60, 20
	var recs []history.Record
	for i := range leases {
		recs = append(recs, grant(i, now.Add(time.Duration(i-leases)*time.Second)))
	}
	appendAll(t, h, recs...)
	if err := chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("%s/?since=1h&limit=%d", s.URL, limit))); err != nil {
		t.Fatal(err)
	}
	type shown struct {
		Lanes  []string `json:"lanes"`
		Notice string   `json:"notice"`
	}
	wait := func(what, cond string) shown {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		const state = `({lanes: [...document.querySelectorAll('#timeline .lane')].map(l => l.dataset.lane),
			notice: (document.getElementById('notice') || {hidden: true}).hidden ? '' : document.getElementById('notice').textContent})`
		js := `document.body.dataset.state === 'live' && !!document.getElementById('timeline') && (() => { const s = ` + state + `; return ` + cond + ` ? s : null })()`
		got, err := chromedp.Run(wctx, chromedp.Poll[shown](js, chromedp.WithPollingTimeout(15*time.Second)))
		if err != nil {
			now, _ := chromedp.Run(context.WithoutCancel(wctx), chromedp.Evaluate[shown](state))
			t.Fatalf("the page never showed %s: %v; it shows %d lanes %q, notice %q", what, err, len(now.Lanes), now.Lanes, now.Notice)
		}
		return got
	}
	got := wait("the last leases granted", `s.lanes.includes('lim.059')`)
	if len(got.Lanes) != limit || got.Lanes[0] != fmt.Sprintf("lim.%03d", leases-limit) ||
		!strings.Contains(got.Notice, fmt.Sprintf("%d of %d tenures shown", limit, leases)) {
		t.Errorf("lanes %q, notice %q; want the last %d granted and a notice of %d of %d", got.Lanes, got.Notice, limit, limit, leases)
	}
	// New leases, live: shown, the page still at its limit.
	recs = recs[:0]
	for i := leases; i < leases+10; i++ {
		recs = append(recs, grant(i, time.Now()))
	}
	appendAll(t, h, recs...)
	got = wait("the new leases", `s.lanes.includes('lim.069')`)
	if len(got.Lanes) != limit || !strings.Contains(got.Notice, fmt.Sprintf("%d of %d tenures shown", limit, leases+10)) {
		t.Errorf("after 10 new leases: %d lanes %q, notice %q; want %d, a notice of %d of %d", len(got.Lanes), got.Lanes, got.Notice, limit, limit, leases+10)
	}
}

// The page lets go of the least recently active tenure when a new one
// comes past its limit, whatever the leases' names: it took /api/tenures'
// reply (by name, then begin) as its order of activity, and let go of
// the first by name, the lease granted last and live among them, while
// older ones stayed (found in review: a live lease vanished from the page
// as the next lease was granted).
func TestPageLetsGoOfTheLeastRecentlyActive(t *testing.T) {
	h, s, ctx := openPage(t)
	now := time.Now().Truncate(time.Millisecond).UTC()
	const leases, limit = 30, 20
	var recs []history.Record
	for i := range leases { // granted last, named first
		at := now.Add(time.Duration(i-leases) * time.Second)
		recs = append(recs, history.Record{Kind: history.KindGranted, Name: fmt.Sprintf("rev.%03d", 99-i), Holder: "h",
			Token: uint64(i + 1), Revision: uint64(i + 1), Time: at, GrantedAt: at})
	}
	appendAll(t, h, recs...)
	if err := chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("%s/?since=1h&limit=%d", s.URL, limit))); err != nil {
		t.Fatal(err)
	}
	lanes := func(want string) []string { return waitLanes(t, ctx, want) }
	// The last granted, rev.070 (i = 29), to rev.089 (i = 10).
	lanes(`s.length === 20 && s.includes('rev.070') && s.includes('rev.089')`)
	at := time.Now().UTC()
	appendAll(t, h, history.Record{Kind: history.KindGranted, Name: "rev.new", Holder: "h", Token: 100, Revision: 100, Time: at, GrantedAt: at})
	got := lanes(`s.includes('rev.new')`)
	if len(got) != limit || !slices.Contains(got, "rev.070") || slices.Contains(got, "rev.089") {
		t.Errorf("after a new lease: lanes %q; want %d, rev.070 (granted last before it) kept and rev.089 (the least recently active) let go",
			got, limit)
	}
}

// The page keeps a live lease in view while more new tenures than its
// limit come, as /api/tenures keeps the live leases: it let go of the least
// recently active tenure, which a lease held for long (a leader's, with
// no record since its grant) soon was, and the lease vanished from the
// page while held (found in review).
func TestPageKeepsALiveLeasePastItsLimit(t *testing.T) {
	h, s, ctx := openPage(t)
	now := time.Now().Truncate(time.Millisecond).UTC()
	const limit = 20
	at := now.Add(-time.Hour + time.Minute)
	recs := []history.Record{{Kind: history.KindGranted, Name: "keep.leader", Holder: "h", Token: 1, Revision: 1, Time: at, GrantedAt: at}}
	tenure := func(i int, at time.Time) []history.Record {
		name := fmt.Sprintf("keep.churn.%03d", i)
		return []history.Record{
			{Kind: history.KindGranted, Name: name, Holder: "h", Token: uint64(2*i + 2), Revision: uint64(2*i + 2), Time: at, GrantedAt: at},
			{Kind: history.KindEnded, Name: name, Holder: "h", Token: uint64(2*i + 2), Revision: uint64(2*i + 3), Time: at.Add(time.Millisecond),
				GrantedAt: at, EndedBy: history.EndReleased},
		}
	}
	for i := range limit - 1 {
		recs = append(recs, tenure(i, now.Add(time.Duration(i-limit)*time.Second))...)
	}
	appendAll(t, h, recs...)
	if err := chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("%s/?since=1h&limit=%d", s.URL, limit))); err != nil {
		t.Fatal(err)
	}
	wait := func(want string) []string { return waitLanes(t, ctx, want) }
	wait(`s.length === 20 && s.includes('keep.leader')`)
	recs = recs[:0]
	for i := limit - 1; i < 3*limit; i++ { // more than the page holds
		recs = append(recs, tenure(i, time.Now().UTC())...)
	}
	appendAll(t, h, recs...)
	got := wait(fmt.Sprintf(`s.includes('keep.churn.%03d')`, 3*limit-1))
	if len(got) != limit || !slices.Contains(got, "keep.leader") {
		t.Errorf("after %d tenures more: %d lanes %q; want %d, keep.leader (live) among them", 2*limit+1, len(got), got, limit)
	}
}

// The page shows a window holding more records than /api/tenures reads
// (WithMaxRecords; 200,000 by default, an hour of some 30 tenures a
// second): it follows /events from the window's start instead, as it did
// before it read /api/tenures, keeping at most its limit of tenures. It
// stopped, saying "the window holds more than 200000 history records …
// or follow /events" (found in review).
func TestPageShowsAWindowPastTheReadsBound(t *testing.T) {
	h := openStream(t)
	th, err := timeline.New(h, timeline.WithMaxRecords(5))
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(th)
	t.Cleanup(s.Close)
	ctx := timelinetest.Browser(t)
	now := time.Now().Truncate(time.Millisecond).UTC()
	var recs []history.Record
	for i := range 12 {
		at := now.Add(time.Duration(i-12) * time.Second)
		recs = append(recs, history.Record{Kind: history.KindGranted, Name: fmt.Sprintf("big.%02d", i), Holder: "h",
			Token: uint64(i + 1), Revision: uint64(i + 1), Time: at, GrantedAt: at})
	}
	appendAll(t, h, recs...)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/?since=1h&limit=10")); err != nil {
		t.Fatal(err)
	}
	const state = `({state: document.body.dataset.state, status: document.getElementById('status').textContent,
		lanes: [...document.querySelectorAll('#timeline .lane')].map(l => l.dataset.lane),
		notice: document.getElementById('notice').hidden ? '' : document.getElementById('notice').textContent})`
	type shown struct {
		State, Status, Notice string
		Lanes                 []string
	}
	wait := func(what, cond string) shown {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		js := `document.body.dataset.state === 'live' && !!document.getElementById('timeline') && (() => { const s = ` + state +
			`; return ` + cond + ` ? s : null })()`
		got, err := chromedp.Run(wctx, chromedp.Poll[shown](js, chromedp.WithPollingTimeout(15*time.Second)))
		if err != nil {
			now, _ := chromedp.Run(context.WithoutCancel(wctx), chromedp.Evaluate[shown](state))
			t.Fatalf("the page never showed %s: %v; it shows %+v", what, err, now)
		}
		return got
	}
	got := wait("the last leases granted", `s.lanes.includes('big.11')`)
	if len(got.Lanes) != 10 || !strings.Contains(got.Notice, "10 of 12 tenures shown") {
		t.Errorf("lanes %q, notice %q; want the last 10 granted, 10 of 12 shown", got.Lanes, got.Notice)
	}
	at := time.Now().UTC()
	appendAll(t, h, history.Record{Kind: history.KindGranted, Name: "big.new", Holder: "h", Token: 100, Revision: 100, Time: at, GrantedAt: at})
	wait("a new lease", `s.lanes.includes('big.new') && s.lanes.length === 10`)
}

// waitLanes waits until the live page shows lanes for which the
// JavaScript expression want, over their names s, is true, and returns
// them.
func waitLanes(t *testing.T, ctx context.Context, want string) []string {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	const shown = `[...document.querySelectorAll('#timeline .lane')].map(l => l.dataset.lane)`
	js := `document.body.dataset.state === 'live' && !!document.getElementById('timeline') && (() => { const s = ` + shown +
		`; return ` + want + ` ? s : null })()`
	got, err := chromedp.Run(wctx, chromedp.Poll[[]string](js, chromedp.WithPollingTimeout(15*time.Second)))
	if err != nil {
		now, _ := chromedp.Run(context.WithoutCancel(wctx), chromedp.Evaluate[[]string](shown))
		t.Fatalf("the page never showed %s: %v; its lanes: %q", want, err, now)
	}
	return got
}

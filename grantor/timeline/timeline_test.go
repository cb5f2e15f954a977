package timeline_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/grantor/timeline"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

const xss = `<img src=x onerror=alert(1)>`

// openStream opens a history stream on a real JetStream server.
func openStream(t *testing.T) *history.Stream {
	t.Helper()
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	h, err := history.Open(t.Context(), js, "leases", history.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func appendAll(t *testing.T, h *history.Stream, recs ...history.Record) {
	t.Helper()
	for _, r := range recs {
		if _, err := h.Append(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
}

// scenario is one tenure of each kind of end, one live tenure held by a
// holder whose name is markup, and a lease outside the prefix "tl.".
func scenario(base time.Time) []history.Record {
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	rev := uint64(0)
	begin := func(name, holder string, token uint64, s int) history.Record {
		rev++
		return history.Record{Kind: history.KindGranted, Name: name, Holder: holder, Token: token, Revision: rev,
			Time: at(s), GrantedAt: at(s), DurationMS: 3000, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	}
	end := func(name, holder string, token uint64, s0, s int, by, reason string, renewals int) history.Record {
		rev++
		return history.Record{Kind: history.KindEnded, Name: name, Holder: holder, Token: token, Revision: rev,
			Time: at(s), GrantedAt: at(s0), EndedBy: by, Reason: reason, Renewals: renewals}
	}
	return []history.Record{
		begin("tl.alt", "alice", 1, 0), end("tl.alt", "alice", 1, 0, 3, history.EndReleased, "", 2),
		begin("tl.alt", "bob", 5, 4), end("tl.alt", "bob", 5, 4, 6, history.EndRevoked, "maintenance", 1),
		begin("tl.exp", "carol", 7, 1), end("tl.exp", "carol", 7, 1, 5, history.EndExpired, "", 0),
		begin("tl.reg", "web-1", 9, 2), end("tl.reg", "web-1", 9, 2, 8, history.EndRemoved, history.GossipReasonPrefix+"node n2 dead", 3),
		begin("tl.xss", xss, 11, 3),
		begin("other", "dave", 12, 3),
	}
}

func newServer(t *testing.T, h *history.Stream, opts ...timeline.Option) *httptest.Server {
	t.Helper()
	th, err := timeline.New(h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(th)
	t.Cleanup(s.Close)
	return s
}

func get(t *testing.T, method, u string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// Every response says what the page may load and that its type is what
// it says.
func checkSafetyHeaders(t *testing.T, resp *http.Response) {
	t.Helper()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'self'") {
		t.Errorf("%s: Content-Security-Policy %q", resp.Request.URL, csp)
	}
	if v := resp.Header.Get("X-Content-Type-Options"); v != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options %q", resp.Request.URL, v)
	}
}

func TestBadRequests(t *testing.T) {
	s := newServer(t, openStream(t))
	for _, tc := range []struct {
		name, path, want string
	}{
		{"unparsable since", "/api/tenures?since=yesterday", `since "yesterday"`},
		{"negative since", "/api/tenures?since=-1h", "negative"},
		{"wildcard in prefix", "/api/tenures?prefix=tl.*", "prefix"},
		{"subject wildcard in prefix", "/api/tenures?prefix=tl.>", "prefix"},
		{"empty token in prefix", "/api/tenures?prefix=tl..x", "prefix"},
		{"prefix starting with a dot", "/api/tenures?prefix=.tl", "prefix"},
		{"markup in prefix", "/api/tenures?prefix=" + url.QueryEscape(xss), "prefix"},
		{"unknown parameter", "/api/tenures?sinse=1h", `unknown query parameter "sinse"`},
		{"repeated parameter", "/api/tenures?since=1h&since=2h", "2 times"},
		// after is /events': /api/tenures answered the whole window, as
		// if not asked, to a client reading on after its last reply.
		{"tenures: after", "/api/tenures?after=1@2026-12-07T21:00:00Z", "/events?after="},
		{"bad query", "/api/tenures?since=%zz", "bad query"},
		{"events: bad since", "/events?since=soon", `since "soon"`},
		{"events: bad prefix", "/events?prefix=a%20b", "prefix"},
		{"page: bad prefix", "/?prefix=a*", "prefix"},
		// The history has no record of the grantor's own leases: the
		// page and /api/tenures showed none, with no word why (s21d).
		{"the grantor's own prefix", "/api/tenures?prefix=_leased.", "the grantor's own"},
		{"page: the grantor's own prefix", "/?prefix=_leased", "the grantor's own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, http.MethodGet, s.URL+tc.path)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tc.want) {
				t.Errorf("GET %s: %d %q, want 400 with %q", tc.path, resp.StatusCode, body, tc.want)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("GET %s: Content-Type %q, want plain text", tc.path, ct)
			}
			checkSafetyHeaders(t, resp)
		})
	}
	t.Run("not found", func(t *testing.T) {
		if resp, body := get(t, http.MethodGet, s.URL+"/admin/revoke"); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /admin/revoke: %d %q", resp.StatusCode, body)
		}
	})
}

// The page and its data are read-only: anything but GET and HEAD is 405.
func TestOnlyGetAndHead(t *testing.T) {
	s := newServer(t, openStream(t))
	for _, path := range []string{"/", "/api/tenures", "/events", "/app.js"} {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			resp, body := get(t, m, s.URL+path)
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d (Allow %q) %q, want 405", m, path, resp.StatusCode, resp.Header.Get("Allow"), body)
			}
		}
		resp, body := get(t, http.MethodHead, s.URL+path)
		if resp.StatusCode != http.StatusOK || body != "" {
			t.Errorf("HEAD %s: %d %q", path, resp.StatusCode, body)
		}
		checkSafetyHeaders(t, resp)
	}
}

func TestTenuresJSON(t *testing.T) {
	h := openStream(t)
	recs := scenario(time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC())
	appendAll(t, h, recs...)
	s := newServer(t, h)

	resp, body := get(t, http.MethodGet, s.URL+"/api/tenures?prefix=tl.&since=1h")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/tenures: %d %s", resp.StatusCode, body)
	}
	checkSafetyHeaders(t, resp)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q", ct)
	}
	// The holder's markup is escaped in the JSON itself, so that no
	// browser sniffing it as HTML could run it.
	if strings.Contains(body, "<img") || !strings.Contains(body, `\u003cimg src=x onerror=alert(1)\u003e`) {
		t.Errorf("the holder %q is not escaped in the JSON: %s", xss, body)
	}
	var got timeline.TenuresReply
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := history.Fold(recs[:len(recs)-1]) // all but the lease "other"
	if !reflect.DeepEqual(got.Tenures, want) {
		t.Errorf("tenures:\n got %+v\nwant %+v", got.Tenures, want)
	}
	if got.Prefix != "tl." || time.Since(got.Now) > time.Minute || got.Now.Sub(got.Since).Round(time.Second) != time.Hour {
		t.Errorf("prefix %q, now %v, since %v", got.Prefix, got.Now, got.Since)
	}
	var ends []string
	for _, tn := range got.Tenures {
		ends = append(ends, tn.Name+":"+tn.Holder+":"+tn.EndedBy)
	}
	if w := []string{"tl.alt:alice:released", "tl.alt:bob:revoked", "tl.exp:carol:expired", "tl.reg:web-1:removed",
		"tl.xss:" + xss + ":"}; !reflect.DeepEqual(ends, w) {
		t.Errorf("tenures %q, want %q", ends, w)
	}

	// The JSON's shape, as scripts see it.
	var raw struct {
		Tenures []map[string]any `json:"tenures"`
	}
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "holder", "token", "from", "to", "duration_ms", "renewals", "ended_by", "trace_id"} {
		if _, ok := raw.Tenures[0][k]; !ok {
			t.Errorf("tenure JSON has no %q: %v", k, raw.Tenures[0])
		}
	}

	// A window that begins after every record holds none: an empty list.
	future := url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))
	if _, body := get(t, http.MethodGet, s.URL+"/api/tenures?since="+future); !strings.Contains(body, `"tenures":[]`) {
		t.Errorf("since the future: %s", body)
	}
}

// /api/tenures reads a bounded number of records: a window holding more
// is refused, saying so, not read into memory whole (what a request held
// was bounded only by the stream's retention, a day by default).
func TestTenuresBounded(t *testing.T) {
	h := openStream(t)
	recs := scenario(time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC())
	appendAll(t, h, recs...)
	s := newServer(t, h, timeline.WithMaxRecords(len(recs)-1))
	resp, body := get(t, http.MethodGet, s.URL+"/api/tenures?since=1h")
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, fmt.Sprintf("more than %d history records", len(recs)-1)) {
		t.Errorf("a window over the bound: %d %q, want 422 saying so", resp.StatusCode, body)
	}
	// Within the bound, by prefix.
	if resp, body := get(t, http.MethodGet, s.URL+"/api/tenures?prefix=tl.&since=1h"); resp.StatusCode != http.StatusOK {
		t.Errorf("a window within the bound: %d %q", resp.StatusCode, body)
	}
}

// /api/tenures answers at most its limit of tenures (DefaultLimit unless
// asked), the most recently active, saying that the window holds more
// and how many, and where /events resumes: it answered every tenure of
// the window (33,000 leases: 6 MB, 90 MB of serve's RSS, and a page that
// took 11 s to draw).
func TestTenuresLimited(t *testing.T) {
	h := openStream(t)
	base := time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC()
	const leases = 30
	var recs []history.Record
	for i := range leases {
		at := base.Add(time.Duration(i) * time.Second)
		name := fmt.Sprintf("lim.%02d", i)
		recs = append(recs, history.Record{Kind: history.KindGranted, Name: name, Holder: "h", Token: uint64(i + 1),
			Revision: uint64(2*i + 1), Time: at, GrantedAt: at})
		if i%2 == 0 { // every other one ended
			recs = append(recs, history.Record{Kind: history.KindEnded, Name: name, Holder: "h", Token: uint64(i + 1),
				Revision: uint64(2*i + 2), Time: at.Add(500 * time.Millisecond), GrantedAt: at, EndedBy: history.EndReleased})
		}
	}
	appendAll(t, h, recs...)
	s := newServer(t, h)
	reply := func(u string) timeline.TenuresReply {
		t.Helper()
		resp, body := get(t, http.MethodGet, s.URL+u)
		var got timeline.TenuresReply
		if err := json.Unmarshal([]byte(body), &got); resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("GET %s: %d %s (%v)", u, resp.StatusCode, body, err)
		}
		return got
	}
	all := reply("/api/tenures?prefix=lim.")
	if len(all.Tenures) != leases || all.Truncated || all.Total != leases || all.Limit != timeline.DefaultLimit {
		t.Errorf("the window within the default limit: %d tenures, truncated %v, total %d, limit %d; want all %d",
			len(all.Tenures), all.Truncated, all.Total, all.Limit, leases)
	}
	const limit = 10
	got := reply(fmt.Sprintf("/api/tenures?prefix=lim.&limit=%d", limit))
	var names []string
	for _, tn := range got.Tenures {
		names = append(names, tn.Name)
	}
	var want []string // the last ten granted
	for i := leases - limit; i < leases; i++ {
		want = append(want, fmt.Sprintf("lim.%02d", i))
	}
	if !slices.Equal(names, want) || !got.Truncated || got.Total != leases || got.Limit != limit {
		t.Errorf("limit %d: tenures %q, truncated %v, total %d, limit %d; want %q, truncated, total %d",
			limit, names, got.Truncated, got.Total, got.Limit, want, leases)
	}
	if !reflect.DeepEqual(got.Tenures, all.Tenures[leases-limit:]) {
		t.Errorf("limit %d: tenures %+v, want those of the whole window %+v", limit, got.Tenures, all.Tenures[leases-limit:])
	}
	// /events after the last record read sends no record of the window,
	// nor the live leases: what is stored after it.
	if got.After == "" {
		t.Fatalf("no after in %+v", got)
	}
	ev := openEvents(t, s.URL+"/events?prefix=lim.&after="+url.QueryEscape(got.After), nil)
	if rest, _ := untilCaughtUp(t, ev); len(rest) != 0 {
		t.Errorf("/events after %s: %d records before it caught up, want none", got.After, len(rest))
	}
	next := history.Record{Kind: history.KindGranted, Name: "lim.new", Holder: "h", Token: 99, Revision: 99, Time: time.Now(), GrantedAt: time.Now()}
	appendAll(t, h, next)
	if e, err := ev.next(); err != nil || e.name != "record" || !strings.Contains(e.data, `"lim.new"`) {
		t.Errorf("/events after %s: %+v (%v), want lim.new's grant", got.After, e, err)
	}
	for _, bad := range []string{"0", "-1", "x", strconv.Itoa(timeline.MaxLimit + 1)} {
		if resp, body := get(t, http.MethodGet, s.URL+"/api/tenures?limit="+bad); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "limit") {
			t.Errorf("limit %s: %d %q, want 400", bad, resp.StatusCode, body)
		}
	}
	if resp, body := get(t, http.MethodGet, s.URL+"/events?after=yesterday"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "after") {
		t.Errorf("after=yesterday: %d %q, want 400", resp.StatusCode, body)
	}
}

// sse reads server-sent events.
type sse struct {
	r      *bufio.Reader
	lastID *string // the id of the last record read, as a browser keeps it
}

// eventID matches the id of a record's event: its stream sequence and
// stored time.
var eventID = regexp.MustCompile(`^[1-9][0-9]*@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$`)

type event struct{ name, id, data string }

func (s sse) next() (event, error) {
	var ev event
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.name != "" || ev.data != "" {
				if ev.id != "" {
					*s.lastID = ev.id
				}
				return ev, nil
			}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			ev.data += strings.TrimPrefix(line, "data: ")
		}
	}
}

// openEvents opens /events; the stream ends with the test.
func openEvents(t *testing.T, u string, header http.Header) sse {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s %s", u, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	checkSafetyHeaders(t, resp)
	return sse{bufio.NewReader(resp.Body), new(string)}
}

// untilCaughtUp returns the records delivered before "caughtup".
func untilCaughtUp(t *testing.T, s sse) ([]history.Record, event) {
	t.Helper()
	var recs []history.Record
	for {
		ev, err := s.next()
		if err != nil {
			t.Fatalf("events: %v (after %d records)", err, len(recs))
		}
		switch ev.name {
		case "caughtup":
			return recs, ev
		case "record":
			var r history.Record
			if err := json.Unmarshal([]byte(ev.data), &r); err != nil {
				t.Fatalf("record %q: %v", ev.data, err)
			}
			if strings.Contains(ev.data, "<") {
				t.Errorf("record data not escaped: %s", ev.data)
			}
			if !eventID.MatchString(ev.id) {
				t.Errorf("record id %q, want its place in the stream", ev.id)
			}
			recs = append(recs, r)
		default:
			t.Fatalf("unexpected event %+v", ev)
		}
	}
}

// /events delivers the stored records of the prefix, says when it has
// caught up, then delivers a record appended afterwards.
func TestEventsDeliverNewRecords(t *testing.T) {
	h := openStream(t)
	recs := scenario(time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC())
	appendAll(t, h, recs...)
	s := newServer(t, h)

	ev := openEvents(t, s.URL+"/events?prefix=tl.&since=1h", nil)
	got, cu := untilCaughtUp(t, ev)
	if want := recs[:len(recs)-1]; !reflect.DeepEqual(got, want) {
		t.Errorf("stored records:\n got %+v\nwant %+v", got, want)
	}
	var c struct {
		Now      time.Time `json:"now"`
		Since    time.Time `json:"since"`
		WindowMS int64     `json:"window_ms"`
	}
	if err := json.Unmarshal([]byte(cu.data), &c); err != nil || c.WindowMS != time.Hour.Milliseconds() || c.Now.Sub(c.Since).Round(time.Second) != time.Hour {
		t.Errorf("caughtup %s: %v", cu.data, err)
	}

	now := time.Now().Truncate(time.Millisecond).UTC()
	fresh := history.Record{Kind: history.KindGranted, Name: "tl.new", Holder: "erin", Token: 20, Revision: 40, Time: now, GrantedAt: now}
	appendAll(t, h, history.Record{Kind: history.KindGranted, Name: "elsewhere", Holder: "x", Token: 19, Revision: 39, Time: now}, fresh)
	next, err := ev.next()
	if err != nil {
		t.Fatal(err)
	}
	var r history.Record
	if err := json.Unmarshal([]byte(next.data), &r); err != nil || next.name != "record" || !reflect.DeepEqual(r, fresh) {
		t.Errorf("after caughtup: %+v (%v), want the record of tl.new", next, err)
	}

	// A browser reconnecting with the last id it saw gets only what is
	// newer: not the records before.
	again := openEvents(t, s.URL+"/events?prefix=tl.&since=1h", http.Header{"Last-Event-ID": {*ev.lastID}})
	if got, _ := untilCaughtUp(t, again); len(got) != 0 {
		t.Errorf("resumed after the last record: got %d records again", len(got))
	}
}

// A page reconnecting to /events gets every record appended after the
// last one it saw, whatever their Times (the changes'), none again: it
// resumed 5 s before the last record's Time, but the stream keeps them in
// the order they were appended, so a record whose Time ran ahead of the
// stream server's clock by more (written by a node whose clock is ahead,
// as EndLive's end records are) hid every record appended after it from
// a page that reconnected. A record appended late (its Time long past)
// must reach it too.
func TestEventsResumeMissesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ahead time.Duration // of the last record the page sees before it reconnects
	}{
		{"after a record stamped ahead", time.Minute},
		{"after a record stamped now", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := openStream(t)
			s := newServer(t, h)
			now := time.Now().Truncate(time.Millisecond).UTC()
			rec := func(name string, token uint64, at time.Time) history.Record {
				return history.Record{Kind: history.KindGranted, Name: name, Holder: "h", Token: token, Revision: token, Time: at, GrantedAt: at}
			}
			seen := rec("tl.seen", 1, now.Add(tc.ahead))
			appendAll(t, h, seen)
			first := openEvents(t, s.URL+"/events?since=1h", nil)
			if got, _ := untilCaughtUp(t, first); !reflect.DeepEqual(got, []history.Record{seen}) {
				t.Fatalf("first connection: %+v, want %+v", got, seen)
			}
			// While the page is away: a record appended late (an observer
			// catching up) and one of now.
			missed := []history.Record{rec("tl.late", 2, now.Add(-30*time.Second)), rec("tl.now", 3, now)}
			appendAll(t, h, missed...)
			again := openEvents(t, s.URL+"/events?since=1h", http.Header{"Last-Event-ID": {*first.lastID}})
			if got, _ := untilCaughtUp(t, again); !reflect.DeepEqual(got, missed) {
				t.Errorf("reconnected after %s: got %+v\nwant %+v", *first.lastID, got, missed)
			}
		})
	}
}

// The page is served from the binary, names the Jaeger UI only escaped,
// and its script never hands data to the HTML parser.
func TestPage(t *testing.T) {
	h := openStream(t)
	s := newServer(t, h, timeline.WithJaegerUI(`http://jaeger.example:16686/ui/"><script>alert(1)</script>/`))
	resp, body := get(t, http.MethodGet, s.URL+"/")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	checkSafetyHeaders(t, resp)
	if strings.Contains(body, "<script>alert") || !strings.Contains(body, `data-jaeger="http://jaeger.example:16686/ui/%22%3E%3Cscript%3Ealert%281%29%3C/script%3E"`) {
		t.Errorf("Jaeger UI not escaped in the page:\n%s", body)
	}
	for _, tc := range []struct{ path, ctype string }{
		{"/app.js", "text/javascript"}, {"/app.css", "text/css"}, {"/favicon.svg", "image/svg+xml"},
	} {
		resp, body := get(t, http.MethodGet, s.URL+tc.path)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.ctype) || body == "" {
			t.Errorf("GET %s: %d %q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		checkSafetyHeaders(t, resp)
		if tc.path == "/app.js" {
			for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
				if strings.Contains(body, sink) {
					t.Errorf("app.js uses %s: data must reach the page as text only", sink)
				}
			}
		}
	}
}

func TestOptions(t *testing.T) {
	h := openStream(t)
	if _, err := timeline.New(nil); !errors.Is(err, timeline.ErrOption) {
		t.Errorf("New(nil): %v", err)
	}
	for _, tc := range []struct {
		name string
		opt  timeline.Option
	}{
		{"nil option", nil},
		{"nil logger", timeline.WithLogger(nil)},
		{"javascript: URL", timeline.WithJaegerUI("javascript:alert(1)")},
		{"relative URL", timeline.WithJaegerUI("/jaeger")},
		{"no host", timeline.WithJaegerUI("http://")},
		{"ftp", timeline.WithJaegerUI("ftp://jaeger:16686")},
		{"query", timeline.WithJaegerUI("http://jaeger:16686/?x=1")},
		{"fragment", timeline.WithJaegerUI("http://jaeger:16686/#x")},
		{"user", timeline.WithJaegerUI("http://me:s3cret-pw@jaeger:16686")},
		{"unparsable", timeline.WithJaegerUI("http://me:s3cret-pw@[::1")},
		{"no records", timeline.WithMaxRecords(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := timeline.New(h, tc.opt)
			if !errors.Is(err, timeline.ErrOption) {
				t.Errorf("New: %v, want ErrOption", err)
			}
			if strings.Contains(err.Error(), "s3cret-pw") {
				t.Errorf("New: %v shows the URL's password", err)
			}
			if err := timeline.CheckOptions(tc.opt); !errors.Is(err, timeline.ErrOption) {
				t.Errorf("CheckOptions: %v, want ErrOption", err)
			}
		})
	}
	if _, err := timeline.New(h, timeline.WithJaegerUI("https://jaeger.example/")); err != nil {
		t.Errorf("a good Jaeger UI: %v", err)
	}
}

// A lease granted before the window and live now is a tenure of the
// window, from /api/tenures and first thing from /events (it had no
// record in the window, and a leader that had held longer than the view
// did not show); a failed listing is a 503, like a failed read.
func TestLeasesLiveSinceBeforeTheWindow(t *testing.T) {
	h := openStream(t)
	recs := scenario(time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC())
	appendAll(t, h, recs...)
	granted := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond).UTC()
	leases := []kvlease.Record{
		{Name: "tl.old", Holder: "leader-1", Token: 3, Revision: 900, Duration: 10 * time.Second, GrantedAt: granted},
		{Name: "other.old", Holder: "x", Token: 4, Revision: 901, Duration: time.Second, GrantedAt: granted},
	}
	var refused atomic.Bool
	var unavailable atomic.Int32 // calls yet to fail as unavailable
	list := func(_ context.Context, prefix string) ([]kvlease.Record, error) {
		if refused.Load() {
			return nil, kvlease.ErrBucket
		}
		if unavailable.Add(-1) >= 0 {
			return nil, kvlease.ErrUnavailable
		}
		var out []kvlease.Record
		for _, l := range leases {
			if strings.HasPrefix(l.Name, prefix) {
				out = append(out, l)
			}
		}
		return out, nil
	}
	s := newServer(t, h, timeline.WithLive(list))

	_, body := get(t, http.MethodGet, s.URL+"/api/tenures?prefix=tl.&since=1h")
	var got timeline.TenuresReply
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := history.Tenure{Name: "tl.old", Holder: "leader-1", Token: 3, From: granted, DurationMS: 10000}
	if i := slices.IndexFunc(got.Tenures, func(tn history.Tenure) bool { return tn.Name == "tl.old" }); i < 0 ||
		!reflect.DeepEqual(got.Tenures[i], want) || len(got.Tenures) != len(history.Fold(recs[:len(recs)-1]))+1 {
		t.Errorf("tenures %+v, want the window's and %+v", got.Tenures, want)
	}

	ev := openEvents(t, s.URL+"/events?prefix=tl.&since=1h", nil)
	first, err := ev.next()
	if err != nil {
		t.Fatal(err)
	}
	var r history.Record
	if err := json.Unmarshal([]byte(first.data), &r); err != nil || first.name != "record" || first.id != "" ||
		r.Name != "tl.old" || r.Kind != history.KindGranted || !r.GrantedAt.Equal(granted) {
		t.Errorf("first event %+v (%v), want the live lease's grant, without an id", first, err)
	}
	if rest, _ := untilCaughtUp(t, ev); !reflect.DeepEqual(rest, recs[:len(recs)-1]) {
		t.Errorf("after the live lease: %+v", rest)
	}

	// Unavailable for a moment (a failover): asked again.
	unavailable.Store(2)
	if resp, body := get(t, http.MethodGet, s.URL+"/api/tenures?prefix=tl.&since=1h"); resp.StatusCode != http.StatusOK || !strings.Contains(body, "leader-1") {
		t.Errorf("GET /api/tenures with the listing unavailable twice: %d %s", resp.StatusCode, body)
	}
	refused.Store(true)
	for _, u := range []string{"/api/tenures?since=1h", "/events?since=1h"} {
		if resp, body := get(t, http.MethodGet, s.URL+u); resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("GET %s with the listing refused: %d %s", u, resp.StatusCode, body)
		}
	}
}

// /api/tenures reads at most MaxReads windows at once and refuses more,
// 503: each read holds up to WithMaxRecords records until it is answered,
// and twelve at once on a window of a bench's history grew serve from
// 0.75 to 1.7 GB of RSS (the lease server's own memory), all answered 503
// after 30 s (found by an outside client). The reads are held in the
// listing of the live leases, which comes after the history's.
func TestTenuresReadsBounded(t *testing.T) {
	h := openStream(t)
	appendAll(t, h, scenario(time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC())...)
	entered, release := make(chan struct{}), make(chan struct{})
	list := func(ctx context.Context, _ string) ([]kvlease.Record, error) {
		select {
		case entered <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s := newServer(t, h, timeline.WithLive(list))
	type answer struct {
		code       int
		retryAfter string
		err        error
	}
	answers := make(chan answer, timeline.MaxReads+1)
	ask := func() {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+"/api/tenures?since=1h", nil)
		if err != nil {
			answers <- answer{err: err}
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answers <- answer{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answers <- answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	}
	for range timeline.MaxReads {
		go ask()
	}
	for range timeline.MaxReads {
		select {
		case <-entered:
		case a := <-answers:
			t.Fatalf("a read within the bound answered %+v before it listed the live leases", a)
		}
	}
	go ask()
	select {
	case <-entered:
		t.Errorf("read %d windows at once, want at most %d", timeline.MaxReads+1, timeline.MaxReads)
		close(release)
		return
	case a := <-answers:
		if a.err != nil || a.code != http.StatusServiceUnavailable || a.retryAfter == "" {
			t.Errorf("a read over the bound: %+v, want 503 with Retry-After", a)
		}
	}
	close(release)
	for range timeline.MaxReads {
		if a := <-answers; a.err != nil || a.code != http.StatusOK {
			t.Errorf("a read within the bound: %+v, want 200", a)
		}
	}
	// The slots are free again.
	go ask()
	<-entered
	if a := <-answers; a.err != nil || a.code != http.StatusOK {
		t.Errorf("a read after the others: %+v, want 200", a)
	}
}

// The pages' listings of the live leases take the reads' slots too: each
// /events opened read every live lease under its prefix, however many
// pages opened at once (twenty pages opened together on 50,000 live
// leases grew serve's RSS from 0.23 to 1.9 GB, where twenty reads of
// /api/tenures stopped at 0.7; found by an outside client). A page over
// the bound waits for a slot rather than being refused: a browser does
// not open a refused stream again.
func TestEventsLiveListingsBounded(t *testing.T) {
	h := openStream(t)
	appendAll(t, h, scenario(time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC())...)
	var listing, most atomic.Int32
	entered, release := make(chan struct{}, timeline.MaxReads+2), make(chan struct{})
	list := func(ctx context.Context, _ string) ([]kvlease.Record, error) {
		n := listing.Add(1)
		defer listing.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		entered <- struct{}{}
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s := newServer(t, h, timeline.WithLive(list))
	codes := make(chan int, timeline.MaxReads+2) // 0: no answer
	ask := func(path string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+path, nil)
		if err != nil {
			codes <- 0
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			codes <- 0
			return
		}
		resp.Body.Close()
		codes <- resp.StatusCode
	}
	for range timeline.MaxReads {
		go ask("/events?since=1h")
	}
	for range timeline.MaxReads {
		select {
		case <-entered:
		case code := <-codes:
			t.Fatalf("a page within the bound answered %d before it listed the live leases", code)
		}
	}
	// Every slot is a page's listing now: a read is refused.
	go ask("/api/tenures?since=1h")
	select {
	case <-entered:
		t.Errorf("/api/tenures listed the live leases while %d pages listed them, want at most %d listings at once",
			timeline.MaxReads, timeline.MaxReads)
		close(release)
		return
	case code := <-codes:
		if code != http.StatusServiceUnavailable {
			t.Errorf("/api/tenures with every slot a page's listing: %d, want 503", code)
		}
	}
	go ask("/events?since=1h") // waits for a slot
	close(release)
	for range timeline.MaxReads + 1 {
		if code := <-codes; code != http.StatusOK {
			t.Errorf("a page: %d, want 200 (a page over the bound waits)", code)
		}
	}
	if n := most.Load(); n > timeline.MaxReads {
		t.Errorf("%d listings of the live leases at once, want at most %d", n, timeline.MaxReads)
	}
}

// deadlineWriter is a ResponseWriter that notes whether each write had a
// write deadline ahead of it, as a connection would enforce one.
type deadlineWriter struct {
	hdr http.Header
	mu  sync.Mutex
	// deadline is the last one set; undeadlined counts the writes made
	// without one ahead.
	deadline    time.Time
	undeadlined int
	body        strings.Builder
	caughtUp    chan struct{} // closed once "caughtup" has been written
}

func (w *deadlineWriter) Header() http.Header { return w.hdr }
func (w *deadlineWriter) WriteHeader(int)     {}
func (w *deadlineWriter) FlushError() error   { return nil }
func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.deadline.After(time.Now()) {
		w.undeadlined++
	}
	w.body.Write(b)
	if strings.Contains(string(b), "event: caughtup") {
		close(w.caughtUp)
	}
	return len(b), nil
}

func (w *deadlineWriter) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deadline = t
	return nil
}

// Each write of /events has a deadline, cleared when the stream ends: a
// client that stops reading (its connection's buffers full) held one of
// the MaxFollowers slots and a consumer on the stream for as long as it
// kept the connection open, blocked in a write with none (found by an
// outside client), and a deadline left behind would fail the next
// response on the connection.
func TestEventsWritesHaveADeadline(t *testing.T) {
	h := openStream(t)
	appendAll(t, h, scenario(time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC())...)
	th, err := timeline.New(h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/events?since=1h", nil)
	w := &deadlineWriter{hdr: http.Header{}, caughtUp: make(chan struct{})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		th.ServeHTTP(w, req)
	}()
	select {
	case <-w.caughtUp:
	case <-served:
		t.Fatalf("/events ended before it caught up: %s", w.body.String())
	}
	cancel()
	<-served
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.undeadlined > 0 {
		t.Errorf("%d writes of /events without a write deadline", w.undeadlined)
	}
	if !w.deadline.IsZero() {
		t.Errorf("the write deadline %v left set after the stream ended", w.deadline)
	}
}

// /api/tenures counts a live lease granted in the window whose grant it
// did not read (stored after its read ended, or not yet by the observer):
// it took every live lease granted in the window for one whose grant it
// had read and counted, and so answered total 1 of 2 tenures, not
// truncated (found in review: 1932 of 1935 tenures under bench's load).
func TestTenuresTotalCountsALiveLeaseNotRead(t *testing.T) {
	h := openStream(t)
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC()
	appendAll(t, h, history.Record{Kind: history.KindGranted, Name: "tot.read", Holder: "h", Token: 5, Revision: 5, Time: at, GrantedAt: at})
	later := at.Add(30 * time.Second)
	live := []kvlease.Record{
		{Name: "tot.read", Holder: "h", Token: 5, GrantedAt: at, Duration: time.Hour},
		{Name: "tot.unread", Holder: "h", Token: 9, GrantedAt: later, Duration: time.Hour},
	}
	s := newServer(t, h, timeline.WithLive(func(context.Context, string) ([]kvlease.Record, error) { return live, nil }))
	for _, limit := range []int{1, 2} {
		resp, body := get(t, http.MethodGet, fmt.Sprintf("%s/api/tenures?prefix=tot.&limit=%d", s.URL, limit))
		var got timeline.TenuresReply
		if err := json.Unmarshal([]byte(body), &got); resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("%d %s (%v)", resp.StatusCode, body, err)
		}
		if got.Total != 2 || len(got.Tenures) != limit || got.Truncated != (limit < 2) {
			t.Errorf("limit %d: %d tenures, total %d, truncated %v; want %d, total 2, truncated %v",
				limit, len(got.Tenures), got.Total, got.Truncated, limit, limit < 2)
		}
	}
}

// /api/tenures keeps the live leases first, as README and docs/api.md
// say: they are read after the window's records, so with more live
// leases than limit it answers the last limit of them by name and no
// ended tenure, and with fewer, all of them and then the ended tenures
// whose records came last. The docs said "the most recently active (the
// live leases among them)": with limit 2 and 5 live leases, 3 were
// missing (found by an outside client).
func TestTenuresKeepLiveLeasesFirst(t *testing.T) {
	h := openStream(t)
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC()
	var recs []history.Record
	for i, name := range []string{"lf.old", "lf.new"} {
		granted, ended := at.Add(time.Duration(i)*time.Second), at.Add(time.Duration(i)*time.Second+500*time.Millisecond)
		tok := uint64(2*i + 1)
		recs = append(recs,
			history.Record{Kind: history.KindGranted, Name: name, Holder: "h", Token: tok, Revision: tok, Time: granted, GrantedAt: granted},
			history.Record{Kind: history.KindEnded, Name: name, Holder: "h", Token: tok, Revision: tok + 1, Time: ended, GrantedAt: granted,
				EndedBy: history.EndReleased})
	}
	appendAll(t, h, recs...)
	var live []kvlease.Record
	for i, name := range []string{"lf.a", "lf.b", "lf.c", "lf.d", "lf.e"} { // name order, as Store.List gives them
		live = append(live, kvlease.Record{Name: name, Holder: "h", Token: kvlease.Token(10 + i), GrantedAt: at.Add(10 * time.Second),
			Duration: time.Hour})
	}
	s := newServer(t, h, timeline.WithLive(func(context.Context, string) ([]kvlease.Record, error) { return live, nil }))
	for _, c := range []struct {
		limit int
		want  []string
	}{
		{2, []string{"lf.d", "lf.e"}},
		{6, []string{"lf.a", "lf.b", "lf.c", "lf.d", "lf.e", "lf.new"}},
		{7, []string{"lf.a", "lf.b", "lf.c", "lf.d", "lf.e", "lf.new", "lf.old"}},
	} {
		resp, body := get(t, http.MethodGet, fmt.Sprintf("%s/api/tenures?prefix=lf.&limit=%d", s.URL, c.limit))
		var got timeline.TenuresReply
		if err := json.Unmarshal([]byte(body), &got); resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("%d %s (%v)", resp.StatusCode, body, err)
		}
		var names []string
		for _, tn := range got.Tenures {
			names = append(names, tn.Name)
		}
		if !slices.Equal(names, c.want) || got.Truncated != (c.limit < 7) || got.Total != 7 {
			t.Errorf("limit %d: %v, truncated %v, total %d; want %v, truncated %v, total 7",
				c.limit, names, got.Truncated, got.Total, c.want, c.limit < 7)
		}
	}
}

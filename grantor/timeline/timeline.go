package timeline

import (
	"bytes"
	"container/list"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
)

//go:embed assets
var assets embed.FS

// ErrOption is wrapped by the errors of options given to [New].
var ErrOption = errors.New("timeline: bad option")

// DefaultSince is the window shown when a request names none.
const DefaultSince = time.Hour

// MaxFollowers is how many /events streams (open pages) a handler serves
// at once; each holds an ordered consumer on the history stream.
const MaxFollowers = 64

// MaxReads is how many /api/tenures requests a handler serves at once;
// more are refused 503 with Retry-After. Each holds the records of up to
// its limit of tenures ([MaxLimit] at most) and their JSON until it is
// answered, and reads up to the records' bound ([WithMaxRecords]): what
// the handler holds is then bounded by the two, not by how many clients
// ask at once (twelve reads at once of 100 s of a bench's history grew
// serve's RSS from 0.75 to 1.7 GB, and each was answered 503 after 30 s;
// found by an outside client). An /events stream's listing of the live leases ([WithLive])
// takes one of the same slots while it lists, waiting for one.
const MaxReads = 4

// Intervals of /events.
const (
	pingEvery   = 15 * time.Second // a "ping" with the server's clock; keeps proxies from timing out
	readTimeout = 30 * time.Second // of /api/tenures' read of the stream
	// writeTimeout bounds each write of /events: a page that has read
	// nothing for this long is dropped (a browser reads on while its
	// tab is hidden; one that resumes reconnects).
	writeTimeout = time.Minute
)

// DefaultMaxRecords is how many history records /api/tenures reads for
// one request at most: a window holding more is refused, not read, so
// that how long one request reads is bounded by this and not by the
// stream's retention (a day of a few changes a second is some hundred
// thousand records); what it holds is bounded by its limit of tenures.
// [WithMaxRecords] sets another bound.
const DefaultMaxRecords = 200_000

// Handler serves the timeline of one history stream (see the package
// documentation). It is safe for concurrent use.
type Handler struct {
	hist      *history.Stream
	live      func(ctx context.Context, prefix string) ([]kvlease.Record, error)
	jaeger    string
	log       *slog.Logger
	page      []byte        // rendered once: it depends only on the options
	followers chan struct{} // a slot per /events stream
	readers   chan struct{} // a slot per /api/tenures request or /events listing of the live leases
	maxRecs   int           // of /api/tenures' read
}

// Option configures a [Handler].
type Option func(*Handler) error

// WithLive gives the page the leases live now (list, such as
// [kvlease.Store.List]): each view adds them to the window's history
// ([history.Live]), so that a lease held since before the window shows.
// Without it, such a tenure shows only once it ends.
func WithLive(list func(ctx context.Context, prefix string) ([]kvlease.Record, error)) Option {
	return func(h *Handler) error {
		if list == nil {
			return fmt.Errorf("%w: nil live leases", ErrOption)
		}
		h.live = list
		return nil
	}
}

// liveRecords is [history.Live] of the leases live now under prefix (none
// without [WithLive]), asked again while unavailable (a node that has just
// rejoined, a failover: when pages reconnect) until ctx ends, as the
// history's reads are.
func (h *Handler) liveRecords(ctx context.Context, prefix string) ([]history.Record, error) {
	if h.live == nil {
		return nil, nil
	}
	leases, err := kvlease.RetryUnavailable(ctx, time.Second, nil, func() ([]kvlease.Record, error) {
		return h.live(ctx, prefix)
	})
	if err != nil {
		return nil, err
	}
	return history.Live(leases), nil
}

// listLive is liveRecords within readTimeout, in one of the MaxReads
// slots, waited for until ctx ends: a listing reads every live lease
// under prefix, and pages opened at once listed the bucket that many
// times at once (twenty pages on 50,000 live leases grew serve's RSS from
// 0.23 to 1.9 GB; found by an outside client). A page waits rather than
// being refused, and its wait is not its listing's time: a browser does
// not open a refused stream again.
func (h *Handler) listLive(ctx context.Context, prefix string) ([]history.Record, error) {
	if h.live == nil {
		return nil, nil
	}
	select {
	case h.readers <- struct{}{}:
		defer func() { <-h.readers }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	return h.liveRecords(ctx, prefix)
}

// WithJaegerUI links each tenure's details to its grant's trace at
// base/trace/<trace id>. base must be an absolute http or https URL without
// query or fragment; the error wraps [ErrOption].
func WithJaegerUI(base string) Option {
	return func(h *Handler) error {
		// Messages show the URL without its password (url.Error's text
		// would carry it whole).
		u, err := url.Parse(base)
		var ue *url.Error
		switch {
		case errors.As(err, &ue):
			return fmt.Errorf("%w: Jaeger UI: %v", ErrOption, ue.Err)
		case err != nil:
			return fmt.Errorf("%w: Jaeger UI: %v", ErrOption, err)
		case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
			return fmt.Errorf("%w: Jaeger UI %q: want an http:// or https:// URL with a host", ErrOption, u.Redacted())
		case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
			return fmt.Errorf("%w: Jaeger UI %q: want a base URL without query, fragment or user", ErrOption, u.Redacted())
		}
		h.jaeger = strings.TrimRight(u.String(), "/")
		return nil
	}
}

// WithMaxRecords sets how many history records /api/tenures reads for one
// request at most (default [DefaultMaxRecords]); below 1 is an error
// wrapping [ErrOption].
func WithMaxRecords(n int) Option {
	return func(h *Handler) error {
		if n < 1 {
			return fmt.Errorf("%w: max records %d, want at least 1", ErrOption, n)
		}
		h.maxRecs = n
		return nil
	}
}

// WithLogger sets where the handler logs failures to read the stream
// (default: nowhere); nil is an error wrapping [ErrOption].
func WithLogger(log *slog.Logger) Option {
	return func(h *Handler) error {
		if log == nil {
			return fmt.Errorf("%w: nil logger", ErrOption)
		}
		h.log = log
		return nil
	}
}

// New returns a handler serving hist's timeline. A nil stream, a nil
// option or a bad one is an error wrapping [ErrOption].
func New(hist *history.Stream, opts ...Option) (*Handler, error) {
	if hist == nil {
		return nil, fmt.Errorf("%w: nil history stream", ErrOption)
	}
	h, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	h.hist = hist
	tmpl, err := template.ParseFS(assets, "assets/index.html")
	if err != nil {
		return nil, fmt.Errorf("timeline: page template: %w", err)
	}
	var page bytes.Buffer
	if err := tmpl.Execute(&page, struct{ Jaeger string }{h.jaeger}); err != nil {
		return nil, fmt.Errorf("timeline: page template: %w", err)
	}
	h.page = page.Bytes()
	return h, nil
}

// CheckOptions reports the error [New] would return for opts, for a
// command that checks its flags before it has a stream to serve.
func CheckOptions(opts ...Option) error {
	_, err := applyOptions(opts)
	return err
}

func applyOptions(opts []Option) (*Handler, error) {
	h := &Handler{log: slog.New(slog.DiscardHandler), followers: make(chan struct{}, MaxFollowers),
		readers: make(chan struct{}, MaxReads), maxRecs: DefaultMaxRecords}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrOption)
		}
		if err := o(h); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// csp lets the page load only its own script, style and icon, and keeps
// other sites from framing it.
const csp = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// static are the embedded files served as they are.
var static = map[string]string{
	"/app.js":      "text/javascript; charset=utf-8",
	"/app.css":     "text/css; charset=utf-8",
	"/favicon.svg": "image/svg+xml",
}

// ServeHTTP serves the page, its assets, /api/tenures and /events.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", csp)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("method %s not allowed: the timeline is read-only (GET, HEAD)", r.Method), http.StatusMethodNotAllowed)
		return
	}
	path := r.URL.Path
	if path == "" {
		path = "/" // under http.StripPrefix
	}
	if typ, ok := static[path]; ok {
		b, err := assets.ReadFile("assets" + path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		hdr.Set("Content-Type", typ)
		hdr.Set("Cache-Control", "no-cache")
		_, _ = w.Write(b)
		return
	}
	switch path {
	case "/", "/api/tenures", "/events":
	default:
		http.Error(w, "not found: the timeline serves /, /api/tenures and /events", http.StatusNotFound)
		return
	}
	q, err := parseQuery(r.URL.RawQuery, time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch path {
	case "/":
		hdr.Set("Content-Type", "text/html; charset=utf-8")
		hdr.Set("Cache-Control", "no-cache")
		_, _ = w.Write(h.page)
	case "/api/tenures":
		if q.hasAfter {
			// It answered the whole window, as if after were not given, to
			// a client reading on from its last reply (found in review).
			http.Error(w, "after: /api/tenures reads the whole window (since, at most limit tenures); "+
				"/events?after=<its \"after\"> follows the records stored after that one", http.StatusBadRequest)
			return
		}
		h.tenures(w, r, q)
	case "/events":
		h.events(w, r, q)
	}
}

// query is a request's parameters.
type query struct {
	prefix string
	since  time.Time
	window time.Duration // since as a duration back from now; 0 if given as a time
	limit  int           // of /api/tenures' reply
	// after (of /events) is where to resume; hasAfter says it was given,
	// even empty: the caller has the window and the live leases already.
	after    history.Position
	hasAfter bool
}

// Bounds of /api/tenures' reply (its limit parameter).
const (
	// DefaultLimit is how many tenures /api/tenures answers at most when
	// a request names no limit, and the page shows.
	DefaultLimit = 2000
	// MaxLimit is the highest limit a request may ask. A page showing
	// this many takes some seconds to load (33,000 took 11 s).
	MaxLimit = 50_000
)

// parseQuery reads prefix, since, limit and after from raw, refusing
// anything else.
func parseQuery(raw string, now time.Time) (query, error) {
	v, err := url.ParseQuery(raw)
	if err != nil {
		return query{}, fmt.Errorf("bad query: %v", err)
	}
	for k, vals := range v {
		switch {
		case k != "prefix" && k != "since" && k != "limit" && k != "after":
			return query{}, fmt.Errorf("unknown query parameter %q (want prefix, since, limit, after)", k)
		case len(vals) > 1:
			return query{}, fmt.Errorf("query parameter %q given %d times", k, len(vals))
		}
	}
	q := query{prefix: v.Get("prefix"), limit: DefaultLimit}
	if err := validatePrefix(q.prefix); err != nil {
		return query{}, err
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			return query{}, fmt.Errorf("limit %q: want a number of tenures from 1 to %d", s, MaxLimit)
		}
		q.limit = n
	}
	if q.hasAfter = v.Has("after"); q.hasAfter && v.Get("after") != "" {
		var ok bool
		if q.after, ok = parseEventID(v.Get("after")); !ok {
			return query{}, fmt.Errorf("after %q: want an event id (<sequence>@<RFC 3339 time>), as /api/tenures' \"after\" gives it", v.Get("after"))
		}
	}
	q.since, q.window, err = parseSince(v.Get("since"), now)
	return q, err
}

// validatePrefix accepts "" or anything that could begin a valid lease
// name (kvlease.ValidateName), the rule kvlease's Watch applies, but for
// a prefix within the grantor's own names ([kvlease.ReservedPrefix]),
// which the history and the live leases of the page leave out: the page
// showed none, with no word why (as `leased history` refuses it).
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := kvlease.ValidateName(strings.TrimSuffix(prefix, ".")); err != nil {
		return fmt.Errorf("prefix %q: not the beginning of a lease name: %v", prefix, err)
	}
	if kvlease.Reserved(prefix) {
		return fmt.Errorf("prefix %q: names beginning %q are the grantor's own, which the history leaves out", prefix,
			kvlease.ReservedPrefix)
	}
	return nil
}

// parseSince is [history.ParseSince], "" being DefaultSince.
func parseSince(s string, now time.Time) (time.Time, time.Duration, error) {
	if s == "" {
		return now.Add(-DefaultSince), DefaultSince, nil
	}
	return history.ParseSince(s, now)
}

// TenuresReply is the body of /api/tenures.
type TenuresReply struct {
	Prefix   string    `json:"prefix"`
	Since    time.Time `json:"since"`
	WindowMS int64     `json:"window_ms,omitempty"` // since as a duration, if given so
	Now      time.Time `json:"now"`
	// Limit is the most tenures the reply holds (the request's limit, or
	// DefaultLimit). Truncated says the window holds more: Tenures are
	// then the Limit read last: the live leases (read after the window's
	// records: all of them if at most Limit, else the last Limit by name),
	// then the ended tenures whose records came last (the most recently
	// active), and Total counts the window's
	// tenures (as read: a tenure whose grant the observer missed and
	// whose end came after Limit others is counted twice).
	Limit     int  `json:"limit"`
	Truncated bool `json:"truncated"`
	Total     int  `json:"total"`
	// After is the id of the last record read (as /events gives ids), ""
	// if none: /events?after=<After> follows the records stored after it.
	After   string           `json:"after"`
	Tenures []history.Tenure `json:"tenures"` // history.Fold order: by name, then begin
}

// recent keeps the records of the limit tenures whose records came last
// (the most recently active), as a request reads a window: what it holds
// is bounded by limit, not by how many tenures the window has.
type recent struct {
	limit int
	since time.Time
	order *list.List // of *recentTenure, the most recently active last
	at    map[tenureKey]*list.Element
	total int  // tenures seen (see TenuresReply.Total)
	gone  bool // a tenure was let go
	// maxRev is the highest bucket revision of a record read from the
	// stream: a live lease granted after it was not read, nor counted.
	maxRev uint64
}

// tenureKey names a tenure as history.Fold does: by lease and token, an
// end whose begin no observer saw (token 0) by its revision.
type tenureKey struct {
	name     string
	token    uint64
	revision uint64 // with token 0
}

type recentTenure struct {
	key  tenureKey
	recs []history.Record
}

// maxRecordsPerTenure bounds the records kept for one tenure: its grant,
// its end and a free, and a few repeats (Fold keeps the first of each).
const maxRecordsPerTenure = 6

func newRecent(limit int, since time.Time) *recent {
	return &recent{limit: limit, since: since, order: list.New(), at: map[tenureKey]*list.Element{}}
}

// add keeps r, its tenure now the most recently active, letting the least
// recently active go if there are more than limit. live says r is a live
// lease's ([history.Live]), not the stream's.
func (c *recent) add(r history.Record, live bool) {
	if !live {
		c.maxRev = max(c.maxRev, r.Revision)
	}
	k := tenureKey{name: r.Name, token: r.Token}
	if r.Token == 0 {
		k.revision = r.Revision
	}
	if e, ok := c.at[k]; ok {
		t := e.Value.(*recentTenure)
		if len(t.recs) < maxRecordsPerTenure {
			t.recs = append(t.recs, r)
		}
		c.order.MoveToBack(e)
		return
	}
	if r.Kind == history.KindFreed {
		return // of a tenure not kept: Fold makes no row of it
	}
	// A tenure not kept: counted unless its grant is in the window, and
	// so was counted (a tenure let go before its end, a live lease whose
	// grant was read). A live lease granted after the last record read
	// was not (its grant stored after the read, or not yet: it counted
	// none of them, total below the tenures answered).
	if !live && r.Kind == history.KindGranted || r.Token == 0 || r.GrantedAt.IsZero() || r.GrantedAt.Before(c.since) ||
		live && r.Revision > c.maxRev {
		c.total++
	}
	c.at[k] = c.order.PushBack(&recentTenure{key: k, recs: []history.Record{r}})
	if c.order.Len() > c.limit {
		old := c.order.Remove(c.order.Front()).(*recentTenure)
		delete(c.at, old.key)
		c.gone = true
	}
}

// tenures folds the records kept.
func (c *recent) tenures() []history.Tenure {
	var recs []history.Record
	for e := c.order.Front(); e != nil; e = e.Next() {
		recs = append(recs, e.Value.(*recentTenure).recs...)
	}
	return history.Fold(recs)
}

func (h *Handler) tenures(w http.ResponseWriter, r *http.Request, q query) {
	select {
	case h.readers <- struct{}{}:
		defer func() { <-h.readers }()
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("too many reads of the history at once (%d): try again shortly, or follow /events", MaxReads),
			http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	now := time.Now()
	// The tenures whose records come last are kept, at most q.limit: what
	// the request keeps of the history is bounded by its limit, not by the
	// window (the live leases under the prefix are listed in full, and
	// added last: they are kept first, the last q.limit by name if more) (it
	// read the whole window into memory and answered every tenure in it:
	// 6 MB and 90 MB of RSS for 33,000 leases, which a page took 11 s to
	// draw).
	kept := newRecent(q.limit, q.since)
	var last history.Position
	read, tooMany := 0, false
	err := h.hist.FollowAfter(ctx, q.prefix, q.since, history.Position{}, func(r history.Record, at history.Position, caughtUp bool) bool {
		switch {
		case caughtUp:
			return false
		case read == h.maxRecs:
			tooMany = true
			return false
		}
		read++
		kept.add(r, false)
		if at.Seq > 0 {
			last = at
		}
		return true
	})
	switch {
	case tooMany:
		http.Error(w, fmt.Sprintf("the window holds more than %d history records: ask a later since or a longer prefix, "+
			"or follow /events", h.maxRecs), http.StatusUnprocessableEntity)
		return
	case err != nil:
		h.log.Warn("timeline: read history", "err", err)
		http.Error(w, "history unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	live, err := h.liveRecords(ctx, q.prefix)
	if err != nil {
		h.log.Warn("timeline: list live leases", "err", err)
		http.Error(w, "live leases unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	for _, r := range live {
		kept.add(r, true)
	}
	reply := TenuresReply{Prefix: q.prefix, Since: q.since.UTC(), WindowMS: q.window.Milliseconds(), Now: now.UTC(),
		Limit: q.limit, Truncated: kept.gone, Total: kept.total, Tenures: kept.tenures()}
	if last.Seq > 0 {
		reply.After = eventID(last)
	}
	if reply.Tenures == nil {
		reply.Tenures = []history.Tenure{}
	}
	b, err := json.Marshal(reply) // escapes <, > and & as \u003c, \u003e, \u0026
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

// caughtUp is the data of the "caughtup" and "ping" events.
type caughtUp struct {
	Now      time.Time `json:"now"`
	Since    time.Time `json:"since,omitzero"`
	WindowMS int64     `json:"window_ms,omitempty"`
}

// followed is one call of the Follow callback.
type followed struct {
	r        history.Record
	at       history.Position
	caughtUp bool
}

// eventID is the id of the event of the record at p: its sequence and
// stored time, "<seq>@<RFC 3339 time>".
func eventID(p history.Position) string {
	return strconv.FormatUint(p.Seq, 10) + "@" + p.Stored.UTC().Format(time.RFC3339Nano)
}

// parseEventID reads an eventID; ok is false (and p zero) for anything else.
func parseEventID(id string) (p history.Position, ok bool) {
	seq, stored, found := strings.Cut(id, "@")
	n, err := strconv.ParseUint(seq, 10, 64)
	if !found || err != nil || n == 0 {
		return history.Position{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, stored)
	if err != nil {
		return history.Position{}, false
	}
	return history.Position{Seq: n, Stored: t}, true
}

func (h *Handler) events(w http.ResponseWriter, r *http.Request, q query) {
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "text/event-stream")
		return
	}
	select {
	case h.followers <- struct{}{}:
		defer func() { <-h.followers }()
	default:
		http.Error(w, fmt.Sprintf("too many open timelines (%d): try again later", MaxFollowers), http.StatusServiceUnavailable)
		return
	}
	// A reconnecting page resumes after the last record it saw, by its
	// place in the stream. It resumed 5 s before that record's Time (the
	// change's), which the stream's order does not follow: after a record
	// whose Time ran ahead of the stream server's clock (another node's,
	// as EndLive's is) by more, the records appended next were never sent
	// to the page. An id not ours (of an older serve) resumes from since.
	after, ok := parseEventID(r.Header.Get("Last-Event-ID"))
	if !ok {
		after = q.after // the page's first connection, after its read of /api/tenures
	}
	// The leases live now, listed before the follow begins: a change
	// after the listing comes through the follow. A client that gave
	// after has them (from /api/tenures): a listing sent every live lease
	// under the prefix, however many, to a page that shows a bounded
	// number.
	var live []history.Record
	var err error
	if !q.hasAfter {
		live, err = h.listLive(r.Context(), q.prefix)
	}
	switch {
	case r.Context().Err() != nil:
		return // the page has gone
	case err != nil:
		h.log.Warn("timeline: list live leases", "err", err)
		http.Error(w, "live leases unavailable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	items := make(chan followed)
	done := make(chan error, 1)
	go func() {
		done <- h.hist.FollowAfter(ctx, q.prefix, q.since, after, func(rec history.Record, at history.Position, cu bool) bool {
			select {
			case items <- followed{rec, at, cu}:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	defer func() { cancel(); <-done }() // the follower is this handler's: it ends before the handler returns

	// Nothing is written before the stream answers, so that a failure to
	// follow it is a plain 503, not an empty event stream.
	var first followed
	select {
	case first = <-items:
	case err := <-done:
		done <- err
		h.log.Warn("timeline: follow history", "err", err)
		http.Error(w, "history unavailable: "+errString(err), http.StatusServiceUnavailable)
		return
	case <-ctx.Done():
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	rc := http.NewResponseController(w)
	// Each write has a deadline: a client that stops reading (its
	// connection's buffers full) held a slot and a consumer on the stream
	// for as long as it kept the connection open, blocked in a write with
	// none (found by an outside client). Cleared at the end, as net/http
	// does not for the connection's next request.
	write := func(b []byte) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		_, err := w.Write(b)
		return err == nil
	}
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	send := func(event, id string, data any) bool {
		b, err := json.Marshal(data) // one line: no newline can end the event early
		if err != nil {
			return false
		}
		var buf bytes.Buffer
		buf.WriteString("event: " + event + "\n")
		if id != "" {
			buf.WriteString("id: " + id + "\n")
		}
		buf.WriteString("data: ")
		buf.Write(b)
		buf.WriteString("\n\n")
		if !write(buf.Bytes()) {
			return false
		}
		return rc.Flush() == nil
	}
	deliver := func(f followed) bool {
		if f.caughtUp {
			cu := caughtUp{Now: time.Now().UTC(), Since: q.since.UTC()}
			if q.window > 0 {
				cu.WindowMS = q.window.Milliseconds()
			}
			return send("caughtup", "", cu)
		}
		id := "" // kept as it was: a record whose place is unknown resumes after the one before
		if f.at.Seq > 0 {
			id = eventID(f.at)
		}
		return send("record", id, f.r)
	}
	if !write([]byte("retry: 2000\n\n")) {
		return
	}
	for _, r := range live {
		// No id: a page that reconnects resumes after the last record of
		// the history, and is given the live leases again.
		if !send("record", "", r) {
			return
		}
	}
	if !deliver(first) {
		return
	}
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		select {
		case f := <-items:
			if !deliver(f) {
				return
			}
		case <-ping.C:
			if !send("ping", "", caughtUp{Now: time.Now().UTC()}) {
				return
			}
		case err := <-done:
			done <- err
			if ctx.Err() == nil {
				h.log.Warn("timeline: follow history", "err", err)
			}
			return // the page reconnects
		case <-ctx.Done():
			return
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "the stream ended"
	}
	return err.Error()
}

package grantor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// request sends body to subject as a non-Go client would and returns the
// lease or the error code of the reply.
func request(t *testing.T, nc *nats.Conn, subject, body string) (api.Lease, string) {
	t.Helper()
	reply, err := nc.Request(subject, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var l api.Lease
	if code := reply.Header.Get(api.HeaderErrorCode); code != "" {
		return l, code
	}
	if err := json.Unmarshal(reply.Data, &l); err != nil {
		t.Fatalf("reply %s: %v", reply.Data, err)
	}
	return l, ""
}

// The wire protocol of retried grants, as docs/api.md shows it with `nats
// req`: a grant sent again with its request_id and secret returns the
// tenure the first one made; another secret gets "held", other fields
// "request_mismatch"; a retried release succeeds; a grant retried after its
// tenure ended gets "request_used" and writes nothing.
func TestServiceGrantRetryOnTheWire(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	nc := f.nc
	const grant = `{"name":"jobs.nightly","holder":"worker-7","ttl":"15s","request_id":"0f6c2a9e","secret":"my-secret-0123456789"}`
	first, code := request(t, nc, api.SubjectGrant, grant)
	if code != "" || first.Secret != "my-secret-0123456789" || first.RequestID != "0f6c2a9e" || first.Recovered {
		t.Fatalf("grant: %+v, %q; want the caller's secret and request_id, not recovered", first, code)
	}
	again, code := request(t, nc, api.SubjectGrant, grant)
	if code != "" || again.Token != first.Token || again.Revision != first.Revision || !again.Recovered {
		t.Fatalf("retry: %+v, %q; want token %d, recovered", again, code, first.Token)
	}
	for _, c := range []struct{ body, code string }{
		{`{"name":"jobs.nightly","holder":"worker-7","ttl":"15s","request_id":"0f6c2a9e","secret":"someone-else-0123456"}`, api.CodeHeld},
		{`{"name":"jobs.nightly","holder":"worker-7","ttl":"15s"}`, api.CodeHeld},
		{`{"name":"jobs.nightly","holder":"worker-7","ttl":"20s","request_id":"0f6c2a9e","secret":"my-secret-0123456789"}`, api.CodeRequestMismatch},
		{`{"name":"jobs.nightly","holder":"worker-8","ttl":"15s","request_id":"0f6c2a9e","secret":"my-secret-0123456789"}`, api.CodeRequestMismatch},
	} {
		if _, code := request(t, nc, api.SubjectGrant, c.body); code != c.code {
			t.Errorf("%s: %q, want %s", c.body, code, c.code)
		}
	}
	rel, _ := json.Marshal(api.ReleaseRequest{Name: "jobs.nightly", Holder: "worker-7", Token: first.Token,
		Revision: first.Revision, Secret: "my-secret-0123456789"})
	for i := range 2 {
		if reply, err := nc.Request(api.SubjectRelease, rel, 5*time.Second); err != nil || reply.Header.Get(api.HeaderErrorCode) != "" {
			t.Fatalf("release %d: %v %s", i+1, err, reply.Data)
		}
	}
	if _, code := request(t, nc, api.SubjectGrant, grant); code != api.CodeRequestUsed {
		t.Errorf("retry after release: %q, want request_used", code)
	}
	if _, err := f.store.Get(t.Context(), "jobs.nightly"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("after the late retry: %v, want the lease free", err)
	}
	// The Go client maps the codes to kvlease's errors.
	_, err := f.client.Grant(t.Context(), kvlease.GrantRequest{Name: "jobs.nightly", Holder: "worker-7", Duration: 15 * time.Second,
		RequestID: "0f6c2a9e", Secret: "my-secret-0123456789"})
	if !errors.Is(err, kvlease.ErrRequestUsed) {
		t.Errorf("client: %v, want ErrRequestUsed", err)
	}
}

// A holder whose grant reply the network drops between the service and it
// retries (kvlease.Acquire does, with one request id): it gets the tenure
// the service granted, with its token, and nothing is left orphaned.
func TestServiceLostGrantReplyRecovered(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	f := startOn(t, srv.ClientURL(), grantor.DefaultConfig())
	proxy := kvleasetest.NewProxy(t, srv.Addr())
	cl := newClient(t, kvleasetest.Connect(t, proxy.URL()))
	ctx := t.Context()
	w, err := f.store.Watch(ctx, "lost.")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// A client that has had a reply (its clock offset known): a fresh one
	// sends no grant until it has had one (TestFirstGrantIsNotSentWithoutADeadline).
	if _, err := cl.Get(ctx, "lost.none"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("get of a lease never granted: %v", err)
	}
	proxy.DropReplies()
	type result struct {
		l   *kvlease.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := kvlease.Acquire(ctx, cl, "lost.grant", "h", 10*time.Second, kvlease.WithAttemptTimeout(300*time.Millisecond))
		done <- result{l, err}
	}()
	var stored kvlease.Record
	for stored.Token == 0 {
		select {
		case ev := <-w.Events():
			if ev.Type == kvlease.EventGranted && !ev.Replay {
				stored = *ev.Record
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the service stored no grant")
		}
	}
	proxy.Heal()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Token() != stored.Token || !r.l.Record().Recovered {
		t.Fatalf("holder has token %d (recovered %v), the service granted %d", r.l.Token(), r.l.Record().Recovered, stored.Token)
	}
	if err := r.l.Renew(ctx); err != nil {
		t.Fatalf("renew the recovered tenure: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.l.Release(rctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Get(ctx, "lost.grant"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("after release: %v, want the lease free", err)
	}
}

// A retried grant of a holder at its --max-leases-per-holder limit is
// answered with its tenure, which the limit already counts once, not
// refused limit_exceeded.
func TestRetriedGrantAtHolderLimit(t *testing.T) {
	cfg := grantor.DefaultConfig()
	cfg.MaxLeasesPerHolder = 1
	f := start(t, cfg)
	ctx := t.Context()
	id, secret := kvlease.NewRequestID()
	req := kvlease.GrantRequest{Name: "only", Holder: "h", Duration: 10 * time.Second, RequestID: id, Secret: secret}
	first, err := f.client.Grant(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.client.Grant(ctx, req)
	if err != nil || again.Token != first.Token || !again.Recovered {
		t.Fatalf("retry at the limit: %+v, %v; want token %d, recovered", again, err, first.Token)
	}
	_, err = f.client.Grant(ctx, kvlease.GrantRequest{Name: "second", Holder: "h", Duration: 10 * time.Second})
	assertCode(t, err, api.CodeLimitExceeded)
}

// A request that arrives after the deadline its caller put on it (it
// waited in a paused node, or on a cut link, while its caller gave up) is
// answered too_late and not carried out: a grant made for nobody would
// keep the lease taken for a TTL.
func TestRequestPastItsDeadlineNotCarriedOut(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	header := api.HeaderDeadline
	var message string
	send := func(deadline time.Time) string {
		t.Helper()
		msg := nats.NewMsg(api.SubjectGrant)
		msg.Data = []byte(`{"name":"late.job","holder":"h","ttl":"10s"}`)
		msg.Header[header] = []string{fmt.Sprint(deadline.UnixMilli())}
		reply, err := f.nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		message = reply.Header.Get(api.HeaderError)
		return reply.Header.Get(api.HeaderErrorCode)
	}
	if code := send(time.Now().Add(-time.Second)); code != api.CodeTooLate {
		t.Fatalf("grant past its deadline: %q, want %s", code, api.CodeTooLate)
	}
	// It says how late past the deadline (it said 250 ms less, the slack).
	if m := regexp.MustCompile(`\(by (\S+)\)`).FindStringSubmatch(message); m == nil {
		t.Errorf("too_late message %q names no lateness", message)
	} else if d, err := time.ParseDuration(m[1]); err != nil || d < time.Second {
		t.Errorf("too_late message %q: lateness %v, want at least the 1 s it was late", message, m[1])
	}
	if _, err := f.store.Get(ctx, "late.job"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("a late grant was carried out: %v", err)
	}
	// The header's name in any case (a client that lower-cased it had its
	// late grant carried out; found by an outside client).
	header = strings.ToLower(api.HeaderDeadline)
	if code := send(time.Now().Add(-time.Second)); code != api.CodeTooLate {
		t.Fatalf("grant past its deadline, header %s: %q, want %s", header, code, api.CodeTooLate)
	}
	header = api.HeaderDeadline
	if code := send(time.Now().Add(5 * time.Second)); code != "" {
		t.Fatalf("grant before its deadline: %q", code)
	}
	var se *api.ServiceError
	if err := (api.ErrorBody{Code: api.CodeTooLate, Message: "m"}).Err(); !errors.As(err, &se) || !errors.Is(err, kvlease.ErrUnavailable) {
		t.Errorf("too_late maps to %v, want an unavailable ServiceError (callers retry)", err)
	}
}

// Requests that arrive too late are logged at most once a second, the
// next line counting those not logged: a node resuming after a pause finds
// all it queued late, and any caller may send them (a line each, 5,000 in
// 0.2 s; found by an outside client).
func TestTooLateLoggedAtMostOnceASecond(t *testing.T) {
	var logs kvleasetest.Logs
	f := start(t, grantor.DefaultConfig(), grantor.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	const n = 200
	began := time.Now()
	for range n {
		msg := nats.NewMsg(api.SubjectGet)
		msg.Data = []byte(`{"name":"late.job"}`)
		msg.Header.Set(api.HeaderDeadline, "1")
		reply, err := f.nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := reply.Header.Get(api.HeaderErrorCode); code != api.CodeTooLate {
			t.Fatalf("get past its deadline: %q, want %s", code, api.CodeTooLate)
		}
	}
	took := time.Since(began)
	lines := strings.Count(logs.String(), "dropped a request that arrived after its caller's deadline")
	if most := int(took/time.Second) + 1; lines == 0 || lines > most {
		t.Errorf("%d too-late requests in %v logged %d lines; want 1 to %d (at most one a second)", n, took, lines, most)
	}
}

// timeLeft is an extension whose verb left answers how long its request
// may work (the time left on its context), in milliseconds, and whose verb
// wait works until then.
type timeLeft struct{}

func (timeLeft) Endpoints(grantor.Leases) map[string]grantor.Handler {
	return map[string]grantor.Handler{
		"test.v1.left": func(ctx context.Context, _ []byte) (any, error) {
			dl, ok := ctx.Deadline()
			if !ok {
				return nil, errors.New("no deadline")
			}
			return time.Until(dl).Milliseconds(), nil
		},
		"test.v1.wait": func(ctx context.Context, _ []byte) (any, error) { // until the request's time is up
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}
}
func (timeLeft) Start(context.Context) error { return nil }
func (timeLeft) Stop()                       {}

// A request works as long as its caller says it waits (Leased-Timeout-Ms),
// up to grantor.MaxRequestTimeout; one that does not say works for the
// service's request timeout. (A caller's 30 s was cut to the default 5 s:
// "leased ls --timeout 30s" failed on a busy cluster after 5 s.)
func TestRequestWorksAsLongAsItsCallerWaits(t *testing.T) {
	f := start(t, grantor.DefaultConfig(), grantor.WithRequestTimeout(time.Second), grantor.WithExtension(timeLeft{}))
	left := func(header string) time.Duration {
		t.Helper()
		msg := nats.NewMsg("test.v1.left")
		msg.Data = []byte("{}")
		if header != "" {
			msg.Header.Set(api.HeaderTimeout, header)
		}
		reply, err := f.nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var ms int64
		if err := json.Unmarshal(reply.Data, &ms); err != nil {
			t.Fatalf("reply %q %v: %v", reply.Data, reply.Header, err)
		}
		return time.Duration(ms) * time.Millisecond
	}
	for _, c := range []struct {
		header   string
		min, max time.Duration
	}{
		{"", 0, time.Second},
		{"20000", 15 * time.Second, 20 * time.Second},
		{"300", 0, 300 * time.Millisecond},
		{"3600000", grantor.MaxRequestTimeout - 5*time.Second, grantor.MaxRequestTimeout},
		// huge: capped, not wrapped around to a few µs or below 0 (found by an outside client)
		{"9223372036855", grantor.MaxRequestTimeout - 5*time.Second, grantor.MaxRequestTimeout},
		{"18446744073709552", grantor.MaxRequestTimeout - 5*time.Second, grantor.MaxRequestTimeout},
		// beyond 64 bits: capped too, not refused
		{"99999999999999999999999", grantor.MaxRequestTimeout - 5*time.Second, grantor.MaxRequestTimeout},
	} {
		if got := left(c.header); got < c.min || got > c.max {
			t.Errorf("timeout header %q: the request may work %v, want %v to %v", c.header, got, c.min, c.max)
		}
	}
	// A header that is no count of milliseconds is refused, not taken as
	// absent: a deadline the caller meant to be kept would not be (an
	// outside client's malformed deadline was ignored; and one sent
	// empty, again by an outside client).
	for _, h := range []string{api.HeaderTimeout, api.HeaderDeadline} {
		for _, v := range []string{"nonsense", "-5", "0", "1.5", ""} {
			msg := nats.NewMsg("test.v1.left")
			msg.Data = []byte("{}")
			msg.Header.Set(h, v)
			reply, err := f.nc.RequestMsg(msg, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if code := reply.Header.Get(api.HeaderErrorCode); code != api.CodeInvalidArgument {
				t.Errorf("%s: %q: answered %q (%s), want %s", h, v, code, reply.Data, api.CodeInvalidArgument)
			}
		}
	}
}

// A request that takes over a second is logged, with its subject, code
// and time (no body: it may hold a secret), before its reply goes out; a
// quick one is not.
func TestSlowRequestLogged(t *testing.T) {
	var logs kvleasetest.Logs
	f := start(t, grantor.DefaultConfig(), grantor.WithExtension(timeLeft{}),
		grantor.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	send := func(subject, timeoutMS string) {
		t.Helper()
		msg := nats.NewMsg(subject)
		msg.Data = []byte(`{"secret":"s3cr3t"}`)
		msg.Header.Set(api.HeaderTimeout, timeoutMS)
		if _, err := f.nc.RequestMsg(msg, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	send("test.v1.left", "1500")
	if strings.Contains(logs.String(), "slow request") {
		t.Fatalf("a quick request was logged as slow:\n%s", logs.String())
	}
	send("test.v1.wait", "1200") // works until its 1.2 s are up
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"slow request"`) {
			line = l
		}
	}
	if !strings.Contains(line, `"subject":"test.v1.wait"`) || !strings.Contains(line, `"took":"1.2`) ||
		!strings.Contains(line, `"code":"`) || strings.Contains(line, "s3cr3t") {
		t.Fatalf("slow request line %q; want its subject, code and time, and no body (logs:\n%s)", line, logs.String())
	}
}

// The Go client puts its deadline on every request, on the grantor's clock
// as its replies show it (every reply, errors too), once it has had a
// reply; after a too_late answer it sends the next request without one,
// and measures the offset anew.
func TestClientSendsDeadline(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	// A revocation (of nothing: not_found), which is sent once within the
	// caller's deadline; a read is sent in shorter attempts (Client.read).
	seen := make(chan nats.Header, 8)
	kvleasetest.Subscribe(t, f.nc, api.SubjectRevoke, func(m *nats.Msg) {
		if strings.Contains(string(m.Data), "dl.none") { // not the client's own clock reading
			seen <- m.Header
		}
	})
	get := func() nats.Header {
		t.Helper()
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, _ = f.client.Revoke(gctx, "dl.none", "")
		return <-seen
	}
	if h := get(); h.Get(api.HeaderDeadline) != "" {
		t.Fatalf("deadline %q sent before any reply", h.Get(api.HeaderDeadline))
	}
	// That first reply was an error (not_found): it still carried the
	// grantor's clock, so the next request carries a deadline.
	before := time.Now()
	h := get()
	ms, err := strconv.ParseInt(h.Get(api.HeaderDeadline), 10, 64)
	if err != nil || time.UnixMilli(ms).Before(before.Add(2*time.Second)) || time.UnixMilli(ms).After(before.Add(4*time.Second)) {
		t.Fatalf("deadline header %q: want about 3 s from now (one machine: the clocks agree)", h.Get(api.HeaderDeadline))
	}
	f.client.Clock().DistrustOffset()
	if h := get(); h.Get(api.HeaderDeadline) != "" {
		t.Errorf("deadline %q sent with a distrusted offset", h.Get(api.HeaderDeadline))
	}

	// A fresh client reads the grantor's clock before its first grant, so
	// that even that carries a deadline.
	fresh := newClient(t, kvleasetest.Connect(t, f.url))
	grants := make(chan nats.Header, 1)
	kvleasetest.Subscribe(t, f.nc, api.SubjectGrant, func(m *nats.Msg) { grants <- m.Header })
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := fresh.Grant(gctx, kvlease.GrantRequest{Name: "dl.b", Holder: "h", Duration: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if h := <-grants; h.Get(api.HeaderDeadline) == "" {
		t.Error("a fresh client's first grant carries no deadline")
	}
}

// A too_late answer says the request waited past its deadline. The client
// distrusts its clock offset only if the answer came quickly (then the
// offset, not the request, was off); after a slow round trip the offset
// stands, so that its retries still carry deadlines.
func TestClientTooLateDistrustsOnlyAQuickAnswer(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	delay := make(chan time.Duration, 1)
	kvleasetest.Subscribe(t, nc, api.SubjectRevoke, func(m *nats.Msg) { // a grantor behind a slow link (a write: sent once)
		<-time.After(<-delay)
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set(api.HeaderErrorCode, api.CodeTooLate)
		reply.Header.Set(api.HeaderServerTime, time.Now().Format(time.RFC3339Nano))
		_ = m.RespondMsg(reply)
	})
	cl := newClient(t, kvleasetest.Connect(t, srv.ClientURL()))
	get := func(d time.Duration) {
		t.Helper()
		delay <- d
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if _, err := cl.Revoke(ctx, "x", ""); !errors.Is(err, api.ErrTooLate) {
			t.Fatalf("revoke: %v, want too_late", err)
		}
	}
	get(0) // measures the offset (every reply carries the server time)
	get(2 * api.DeadlineSlack)
	if _, _, ok := cl.Clock().Offset(); !ok {
		t.Error("a slow too_late made the client distrust its offset")
	}
	get(0)
	if _, _, ok := cl.Clock().Offset(); ok {
		t.Error("a quick too_late left the offset trusted")
	}
}

// A read (get, list, count, discover) that goes unanswered is sent again
// within the caller's deadline: the service's queue group may hand it to a
// grantor node that is paused, which holds it until its peers drop it,
// and the next attempt goes to a node that answers. Here the one
// responder drops the first request and answers the second.
func TestClientReadsAgainWhenUnanswered(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	var n atomic.Int32
	kvleasetest.Subscribe(t, nc, api.SubjectGet, func(m *nats.Msg) {
		if n.Add(1) == 1 {
			return // held by a paused node
		}
		_ = m.Respond([]byte(`{"name":"x","holder":"h","token":7,"revision":7}`))
	})
	cl := newClient(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	l, err := cl.Get(ctx, "x")
	if err != nil || l.Token != 7 || n.Load() != 2 {
		t.Fatalf("get with its first attempt unanswered: %+v, %v after %d attempts; want token 7 from the second", l, err, n.Load())
	}
}

// A grant refused for JetStream's storage limit says so to its caller and
// in the grantor's log (at most once a second): both said only
// "unavailable", "insufficient resources" (found filling a server's
// max_file_store). A Go client's error is kvlease.ErrStoreFull, as a
// Store's caller's is (it was only ErrUnavailable through the service).
func TestFullStoreLogged(t *testing.T) {
	var logs kvleasetest.Logs
	srv := kvleasetest.NewServer(t, kvleasetest.WithMaxStore(64<<10))
	f := startOn(t, srv.ClientURL(), grantor.DefaultConfig(), grantor.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	pad := map[string]string{"pad": strings.Repeat("x", 1000)}
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		_, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("fill.%d", i), Holder: "h", Duration: time.Minute, Attributes: pad})
		cancel()
		if err == nil {
			if i > 1000 {
				t.Fatal("64 KiB of store took 1000 grants of 1 KiB")
			}
			continue
		}
		if !errors.Is(err, kvlease.ErrUnavailable) || !errors.Is(err, kvlease.ErrStoreFull) || !strings.Contains(err.Error(), "storage is full") {
			t.Fatalf("grant %d into a full store: %v, want unavailable and ErrStoreFull, saying the storage is full", i, err)
		}
		break
	}
	if !strings.Contains(logs.String(), `"msg":"the NATS server's storage is full`) {
		t.Errorf("no line in the log says the storage is full:\n%s", logs.String())
	}
}

// A renewal, release or revocation refused for JetStream's storage limit
// is answered at once, saying the storage is full and that the lease is
// still held: the service tried each again until its caller's deadline,
// and `leased release --timeout 20s` waited 20 s to say "context deadline
// exceeded", while a grant said the storage was full at once (found by an
// outside client).
func TestFullStoreAnsweredAtOnce(t *testing.T) {
	srv := kvleasetest.NewServer(t, kvleasetest.WithMaxStore(64<<10))
	f := startOn(t, srv.ClientURL(), grantor.DefaultConfig())
	ctx := t.Context()
	secret := strings.Repeat("s", 16)
	held, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "held", Holder: "h", Duration: time.Minute, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	grantUntilFull(t, f.client)
	const timeout = 10 * time.Second
	for _, c := range []struct {
		verb, says string
		call       func(context.Context) error
	}{
		{"renew", "not renewed", func(ctx context.Context) error {
			_, err := f.client.Renew(ctx, kvlease.RenewRequest{Name: "held", Holder: "h", Token: held.Token, Revision: held.Revision,
				Secret: secret})
			return err
		}},
		{"release", "not released", func(ctx context.Context) error {
			return f.client.Release(ctx, kvlease.ReleaseRequest{Name: "held", Holder: "h", Token: held.Token, Revision: held.Revision,
				Secret: secret})
		}},
		{"revoke", "not revoked", func(ctx context.Context) error {
			_, err := f.client.Revoke(ctx, "held", "test")
			return err
		}},
	} {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		began := time.Now()
		err := c.call(cctx)
		took := time.Since(began)
		cancel()
		if !errors.Is(err, kvlease.ErrStoreFull) || !strings.Contains(err.Error(), c.says) || took > timeout/2 {
			t.Errorf("%s in a full store: %v after %v; want ErrStoreFull at once, saying %q", c.verb, err, took.Round(time.Millisecond), c.says)
		}
		if l, err := f.client.Get(ctx, "held"); err != nil || l.Token != uint64(held.Token) {
			t.Fatalf("after the %s refused for a full store: %+v, %v; want token %d still held", c.verb, l, err, held.Token)
		}
	}
}

// grantUntilFull grants leases of 1 KiB of attributes through c until
// one is refused, which must be for a full store, within 1000 grants.
func grantUntilFull(t *testing.T, c *client.Client) {
	t.Helper()
	pad := map[string]string{"pad": strings.Repeat("x", 1000)}
	for i := range 1000 {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		_, err := c.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("fill.%d", i), Holder: "h", Duration: time.Minute, Attributes: pad})
		cancel()
		if err == nil {
			continue
		}
		if !errors.Is(err, kvlease.ErrStoreFull) {
			t.Fatalf("grant %d into a full store: %v, want ErrStoreFull", i, err)
		}
		return
	}
	t.Fatal("1000 grants of 1 KiB, and none refused")
}

package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sys/unix"

	"github.com/leased/leased/cmd/leased/internal/faultcheck"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
)

// The fault suite's holders are processes of their own, so that the
// nemesis can SIGSTOP and SIGKILL them: this test binary, started with
// envNemesisHolder set to a holderSpec in JSON, runs one holder instead of
// the tests (TestMain) until its stdin closes.
const envNemesisHolder = "LEASED_NEMESIS_HOLDER"

// holderSpec configures one holder process.
type holderSpec struct {
	Proc   string        // its name in the history, and its holder name
	URLs   []string      // the service, through the nemesis's proxies
	Leases []string      // it competes for these
	D      time.Duration // the duration it asks for
	Log    string        // the file it appends its history to
	Seed   uint64
	// Loops is how many holders the process runs, each on its own (named
	// Proc-1, Proc-2, …; 0 or 1: one, named Proc), sharing its connection:
	// more requests in flight at once, so that the grantor's group commit
	// batches them.
	Loops int
}

// monotonic reads the machine's CLOCK_MONOTONIC, which every process on it
// shares: the history's clock (faultcheck).
func monotonic() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// runNemesisHolder is a holder's life: pick a lease at random, ask for it
// (kvlease.Acquire through the service's Go client), and if granted keep it
// with a kvlease.Keeper (renewing at D/3) for a random time, then release
// it or abandon it (stop renewing, send nothing) at random; again, until
// stdin closes. Now and then it turns zombie after a tenure and renews or
// releases it late, as a paused process would. Every request and reply goes to the history by
// loggedGrantor.
func runNemesisHolder(specJSON string) error {
	var spec holderSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("holder spec: %w", err)
	}
	f, err := os.OpenFile(spec.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	// Pings every second: a connection to a node that is paused or cut off
	// is given up after about two, and the client fails over.
	nc, err := nats.Connect(strings.Join(spec.URLs, ","), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.PingInterval(time.Second), nats.MaxPingsOutstanding(2),
		nats.RetryOnFailedConnect(true), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		return err
	}
	defer nc.Close()
	cl, err := client.New(nc, client.WithTimeout(time.Second))
	if err != nil {
		return err
	}
	g := &loggedGrantor{inner: cl, w: faultcheck.NewWriter(f), proc: spec.Proc, secrets: map[kvlease.Token]string{}}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	loops := max(spec.Loops, 1)
	errs := make(chan error, loops)
	for i := range loops {
		holder := spec.Proc
		if loops > 1 {
			holder = fmt.Sprintf("%s-%d", spec.Proc, i+1)
		}
		rnd := rand.New(rand.NewPCG(spec.Seed, uint64(i)<<1|1))
		go func() { errs <- holderLoop(ctx, g, spec, holder, rnd) }()
	}
	var first error
	for range loops {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}

// holderLoop is one holder's life in a holder process (see
// runNemesisHolder).
func holderLoop(ctx context.Context, g *loggedGrantor, spec holderSpec, holder string, rnd *rand.Rand) error {
	sleep := func(max time.Duration) {
		t := time.NewTimer(time.Duration(rnd.Int64N(int64(max) + 1)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	for ctx.Err() == nil {
		name := spec.Leases[rnd.IntN(len(spec.Leases))]
		// Acquire sends a grant that got no answer again, with the same
		// request id, until its ctx ends: give it room to. Attempts of
		// D/3 (1 s, the client's own timeout) leave time, within the
		// 2·D, for the client to notice a paused or cut-off node (pings
		// every second, two missed) and fail over, and for a new stream
		// leader to be elected, and still for a few attempts after that.
		// A tenure the first attempt made lives ceil(D + m_g) after it
		// was stored, and is recovered by any retry answered before then
		// (if too late for any validity, Acquire gives it back and asks
		// anew, which the rest of the 2·D leaves room for).
		actx, acancel := context.WithTimeout(ctx, 2*spec.D)
		l, err := kvlease.Acquire(actx, g, name, holder, spec.D, kvlease.WithAttemptTimeout(spec.D/3))
		acancel()
		if err != nil {
			sleep(spec.D / 3)
			continue
		}
		k, err := kvlease.Keep(ctx, l)
		if err != nil {
			return err
		}
		hold := time.NewTimer(time.Duration(rnd.Int64N(int64(2 * spec.D))))
		select {
		case <-k.Done():
		case <-ctx.Done():
		case <-hold.C:
			if rnd.IntN(2) == 0 {
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				_ = k.Close(cctx)
				ccancel()
			} else {
				k.Orphan()
			}
		}
		hold.Stop()
		<-k.Done()
		if rnd.IntN(3) == 0 {
			// A zombie: a paused process cannot know it was paused, and
			// acts on its old tenure later. Once another tenure has been
			// granted, the service must refuse it.
			sleep(2 * spec.D)
			rec := k.Lease().Record()
			zctx, zcancel := context.WithTimeout(ctx, 2*time.Second)
			if rnd.IntN(2) == 0 {
				_, _ = g.Renew(zctx, kvlease.RenewRequest{Name: name, Holder: holder, Token: rec.Token,
					Revision: rec.Revision, Duration: spec.D, Secret: g.secret(rec.Token)})
			} else {
				_ = g.Release(zctx, kvlease.ReleaseRequest{Name: name, Holder: holder, Token: rec.Token,
					Revision: rec.Revision, Secret: g.secret(rec.Token)})
			}
			zcancel()
		}
		sleep(spec.D / 3)
	}
	return nil
}

// loggedGrantor is a kvlease.Grantor that writes every request and its
// reply to the history: a pending record just before the send (so that a
// holder killed while waiting leaves the request), and the completed one
// when the reply, or the client's give-up, arrives.
type loggedGrantor struct {
	inner kvlease.Grantor
	proc  string

	mu      sync.Mutex // a Keeper renews from its own goroutine
	w       *faultcheck.Writer
	seq     uint64
	secrets map[kvlease.Token]string // of the tenures granted, for zombies
}

// LateWindow is the inner grantor's (the service client's): without it
// kvlease.Acquire, given this wrapper, would not know how late an
// unanswered attempt can still be carried out, and would take a refusal
// after one as final at once, as no real holder on the client does.
func (g *loggedGrantor) LateWindow() (time.Duration, bool) {
	if lb, ok := g.inner.(kvlease.LateBounder); ok {
		return lb.LateWindow()
	}
	return 0, false
}

var _ kvlease.LateBounder = (*loggedGrantor)(nil)

func (g *loggedGrantor) secret(tok kvlease.Token) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.secrets[tok]
}

var _ kvlease.Grantor = (*loggedGrantor)(nil)

// begin logs rec as pending and returns it with its Seq and TSend set.
func (g *loggedGrantor) begin(rec faultcheck.Record) faultcheck.Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	rec.Type, rec.Proc, rec.Seq = faultcheck.TypeOp, g.proc, g.seq
	rec.TSend = monotonic()
	g.write(rec)
	return rec
}

// end logs rec completed by err (and the lease of a successful reply).
func (g *loggedGrantor) end(rec faultcheck.Record, got kvlease.Record, err error) {
	rec.TReply = monotonic()
	rec.Code = faultcheck.CodeOK
	if err == nil {
		rec.Reply = faultcheck.Reply{Holder: got.Holder, Token: uint64(got.Token), Revision: got.Revision,
			Recovered: got.Recovered}
	} else {
		rec.Code = outcome(err)
		var held *kvlease.HeldError
		if errors.As(err, &held) {
			rec.Reply = faultcheck.Reply{Holder: held.Holder, Token: uint64(held.Token)}
		}
		var stale *kvlease.StaleRevisionError
		if errors.As(err, &stale) {
			rec.Reply.Revision = stale.Revision
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.write(rec)
}

func (g *loggedGrantor) write(rec faultcheck.Record) {
	if err := g.w.Write(rec); err != nil {
		panic(fmt.Sprintf("history: %v", err)) // a holder that cannot log would make the run unverifiable
	}
}

// outcome is the history's code for an error: the service's own code, or
// no_reply for anything the client decided by itself (a timeout, a
// connection down): whether the request was carried out is then unknown.
func outcome(err error) string {
	var se *api.ServiceError
	if errors.As(err, &se) {
		return se.Code
	}
	return faultcheck.CodeNoReply
}

func (g *loggedGrantor) Grant(ctx context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	rec := g.begin(faultcheck.Record{Holder: req.Holder, Lease: req.Name, Op: faultcheck.OpGrant,
		Req: faultcheck.Request{D: int64(req.Duration), RequestID: req.RequestID}})
	got, err := g.inner.Grant(ctx, req)
	g.end(rec, got, err)
	if err == nil {
		g.mu.Lock()
		g.secrets[got.Token] = got.Secret
		g.mu.Unlock()
	}
	return got, err
}

func (g *loggedGrantor) Renew(ctx context.Context, req kvlease.RenewRequest) (kvlease.Record, error) {
	rec := g.begin(faultcheck.Record{Holder: req.Holder, Lease: req.Name, Op: faultcheck.OpRenew,
		Req: faultcheck.Request{D: int64(req.Duration), Token: uint64(req.Token), Revision: req.Revision}})
	got, err := g.inner.Renew(ctx, req)
	g.end(rec, got, err)
	return got, err
}

func (g *loggedGrantor) Release(ctx context.Context, req kvlease.ReleaseRequest) error {
	rec := g.begin(faultcheck.Record{Holder: req.Holder, Lease: req.Name, Op: faultcheck.OpRelease,
		Req: faultcheck.Request{Token: uint64(req.Token), Revision: req.Revision}})
	err := g.inner.Release(ctx, req)
	g.end(rec, kvlease.Record{}, err)
	return err
}

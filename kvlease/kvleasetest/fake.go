package kvleasetest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leased/leased/kvlease"
)

// FakeGrantor is an in-memory [kvlease.Grantor], for tests of holders
// (Lease, Keeper and what is built on them) without a server, typically in
// a testing/synctest bubble, where its clock is the bubble's. It behaves
// like the Store: Grant creates a tenure whose token is a new, increasing
// revision; Renew and Release compare-and-set on (holder, token, revision);
// keys lapse ServerTTL(D, [FakeGrantorMargin]) after they were stored. A
// [FakeMode] makes it unreachable, failing fast, refusing renewals or losing
// their replies. It is safe for concurrent use.
//
// It does not check names, holders, durations or secrets, and keeps no
// tombstones: a lapsed or released lease is simply free.
type FakeGrantor struct {
	mu       sync.Mutex
	rev      uint64
	leases   map[string]kvlease.Record
	mode     FakeMode
	renewals []FakeRenewal // every Renew call, reached or not
	releases []kvlease.ReleaseRequest
	grants   int
}

// FakeMode says how a [FakeGrantor] answers.
type FakeMode int

const (
	// FakeOK answers as the Store does.
	FakeOK FakeMode = iota
	// FakeUnreachable blocks every call until its ctx is done, like a
	// request to a partitioned server, then fails with
	// [kvlease.ErrUnavailable].
	FakeUnreachable
	// FakeFailFast fails every call at once with [kvlease.ErrUnavailable]
	// (as when no server responds).
	FakeFailFast
	// FakeRefuse refuses renewals with [kvlease.ErrNotHolder]; grants and
	// releases are answered.
	FakeRefuse
	// FakeLoseReply stores renewals but answers them with
	// [kvlease.ErrUnavailable], as when the reply is lost; grants and
	// releases are answered.
	FakeLoseReply
	// FakeLoseGrantReply stores grants but answers them with
	// [kvlease.ErrUnavailable], as when the reply is lost; renewals and
	// releases are answered.
	FakeLoseGrantReply
)

// FakeRenewal is one call of [FakeGrantor.Renew]: when it came, the mode
// it met, and the request.
type FakeRenewal struct {
	At   time.Time
	Mode FakeMode
	Req  kvlease.RenewRequest
}

// FakeGrantorMargin is a [FakeGrantor]'s grantor margin m_g.
const FakeGrantorMargin = time.Second

var _ kvlease.Grantor = (*FakeGrantor)(nil)

// NewFakeGrantor returns a FakeGrantor that holds no leases, in mode
// [FakeOK].
func NewFakeGrantor() *FakeGrantor {
	return &FakeGrantor{leases: make(map[string]kvlease.Record)}
}

// SetMode changes how the grantor answers from now on.
func (g *FakeGrantor) SetMode(m FakeMode) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mode = m
}

// unreachable blocks until ctx is done, like a request to a partitioned
// server, and fails the way the Store does then.
func (g *FakeGrantor) unreachable(ctx context.Context, op string) error {
	<-ctx.Done()
	return fmt.Errorf("%w: %s: %w", kvlease.ErrUnavailable, op, ctx.Err())
}

// live returns the live record for name (holding g.mu).
func (g *FakeGrantor) live(name string) (kvlease.Record, bool) {
	r, ok := g.leases[name]
	if !ok {
		return kvlease.Record{}, false
	}
	if !time.Now().Before(r.ExpiresAt()) {
		delete(g.leases, name)
		return kvlease.Record{}, false
	}
	return r, true
}

// Grant creates a tenure if the lease is free.
//
// Errors: [*kvlease.HeldError]; [kvlease.ErrUnavailable] in modes
// [FakeUnreachable] and [FakeFailFast].
func (g *FakeGrantor) Grant(ctx context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	g.mu.Lock()
	mode := g.mode
	g.mu.Unlock()
	switch mode {
	case FakeUnreachable:
		return kvlease.Record{}, g.unreachable(ctx, "grant")
	case FakeFailFast:
		return kvlease.Record{}, fmt.Errorf("%w: grant: no responders", kvlease.ErrUnavailable)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur, ok := g.live(req.Name); ok {
		if req.RequestID != "" && cur.RequestID == req.RequestID && cur.Secret == req.Secret {
			if mode == FakeLoseGrantReply {
				return kvlease.Record{}, fmt.Errorf("%w: grant: reply lost", kvlease.ErrUnavailable)
			}
			cur.Recovered = true
			return cur, nil
		}
		return kvlease.Record{}, &kvlease.HeldError{Name: req.Name, Holder: cur.Holder, Token: cur.Token}
	}
	g.rev++
	g.grants++
	now := time.Now()
	rec := kvlease.Record{
		Name: req.Name, Holder: req.Holder, Token: kvlease.Token(g.rev), Revision: g.rev,
		Duration: req.Duration, TTL: kvlease.ServerTTL(req.Duration, FakeGrantorMargin),
		StoredAt: now, GrantedAt: now, Attributes: req.Attributes, Secret: req.Secret, RequestID: req.RequestID,
	}
	g.leases[req.Name] = rec
	if mode == FakeLoseGrantReply {
		return kvlease.Record{}, fmt.Errorf("%w: grant: reply lost", kvlease.ErrUnavailable)
	}
	return rec, nil
}

// Renew extends the tenure named by (Holder, Token, Revision) for Duration.
//
// Errors: [kvlease.ErrNotFound]; [kvlease.ErrNotHolder];
// [*kvlease.StaleRevisionError]; [kvlease.ErrUnavailable] in modes
// [FakeUnreachable], [FakeFailFast] and [FakeLoseReply].
func (g *FakeGrantor) Renew(ctx context.Context, req kvlease.RenewRequest) (kvlease.Record, error) {
	g.mu.Lock()
	mode := g.mode
	g.renewals = append(g.renewals, FakeRenewal{At: time.Now(), Mode: mode, Req: req})
	g.mu.Unlock()
	switch mode {
	case FakeUnreachable:
		return kvlease.Record{}, g.unreachable(ctx, "renew")
	case FakeFailFast:
		return kvlease.Record{}, fmt.Errorf("%w: renew: no responders", kvlease.ErrUnavailable)
	case FakeRefuse:
		return kvlease.Record{}, fmt.Errorf("%w: %q refused", kvlease.ErrNotHolder, req.Name)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	cur, err := g.check(req.Name, req.Holder, req.Token, req.Revision)
	if err != nil {
		return kvlease.Record{}, err
	}
	g.rev++
	cur.Revision, cur.Duration, cur.StoredAt = g.rev, req.Duration, time.Now()
	cur.TTL = kvlease.ServerTTL(req.Duration, FakeGrantorMargin)
	g.leases[req.Name] = cur
	if mode == FakeLoseReply {
		return kvlease.Record{}, fmt.Errorf("%w: renew: reply lost", kvlease.ErrUnavailable)
	}
	return cur, nil
}

// Release ends the tenure named by (Holder, Token, Revision).
//
// Errors: as for Renew, but modes [FakeRefuse] and [FakeLoseReply] do not
// apply.
func (g *FakeGrantor) Release(ctx context.Context, req kvlease.ReleaseRequest) error {
	g.mu.Lock()
	mode := g.mode
	g.mu.Unlock()
	switch mode {
	case FakeUnreachable:
		return g.unreachable(ctx, "release")
	case FakeFailFast:
		return fmt.Errorf("%w: release: no responders", kvlease.ErrUnavailable)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := g.check(req.Name, req.Holder, req.Token, req.Revision); err != nil {
		return err
	}
	g.rev++ // the tombstone
	delete(g.leases, req.Name)
	g.releases = append(g.releases, req)
	return nil
}

// check is the compare of compare-and-set (holding g.mu).
func (g *FakeGrantor) check(name, holder string, token kvlease.Token, rev uint64) (kvlease.Record, error) {
	cur, ok := g.live(name)
	switch {
	case !ok:
		return kvlease.Record{}, fmt.Errorf("%w: %q", kvlease.ErrNotFound, name)
	case cur.Holder != holder || cur.Token != token:
		return kvlease.Record{}, fmt.Errorf("%w: %q held by %q", kvlease.ErrNotHolder, name, cur.Holder)
	case cur.Revision != rev:
		return kvlease.Record{}, &kvlease.StaleRevisionError{Name: name, Revision: cur.Revision}
	}
	return cur, nil
}

// Renewals returns every Renew call so far, in order, including those
// that failed.
func (g *FakeGrantor) Renewals() []FakeRenewal {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]FakeRenewal(nil), g.renewals...)
}

// Releases returns the requests of the releases that succeeded, in order.
func (g *FakeGrantor) Releases() []kvlease.ReleaseRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]kvlease.ReleaseRequest(nil), g.releases...)
}

// Grants counts the grants that succeeded.
func (g *FakeGrantor) Grants() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.grants
}

// Lookup returns the live tenure of name, as the grantor has it.
func (g *FakeGrantor) Lookup(name string) (kvlease.Record, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.live(name)
}

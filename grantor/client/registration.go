package client

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
)

// Discover asks the service for the instances of service. maxSuspicion > 0
// leaves out instances whose node's suspicion is at or above it.
//
// It asks for all of them in one reply; if they do not fit one message
// (too_large), it asks again page by page and returns them all: each page
// is a read of its own (see [api.DiscoverRequest]). A service too old to
// page answers that with the first refusal. ctx bounds the whole.
func (c *Client) Discover(ctx context.Context, service string, maxSuspicion float64) (api.DiscoverReply, error) {
	req := api.DiscoverRequest{Service: service, MaxSuspicion: maxSuspicion}
	var out api.DiscoverReply
	tooLarge := c.read(ctx, api.SubjectDiscover, req, &out)
	if !errors.Is(tooLarge, api.ErrTooLarge) {
		return out, tooLarge
	}
	all := api.DiscoverReply{Instances: []api.Instance{}}
	req.Limit = discoverPage
	for {
		var page api.DiscoverReply
		if err := c.read(ctx, api.SubjectDiscover, req, &page); err != nil {
			if errors.Is(err, api.ErrInvalidRequest) { // a service that does not page
				return api.DiscoverReply{}, tooLarge
			}
			return api.DiscoverReply{}, err
		}
		all.Instances = append(all.Instances, page.Instances...)
		all.Threshold = page.Threshold
		if !page.More || len(page.Instances) == 0 {
			return all, nil
		}
		req.After = page.Instances[len(page.Instances)-1].Instance
	}
}

// discoverPage is how many instances Discover asks for in one page; a
// page holds fewer if they do not fit one message.
const discoverPage = 1000

// Register registers an instance through g (a [*Client], or a
// kvlease.Store) and keeps the registration renewed until the returned
// keeper is closed (which deregisters) or the registration is lost. It is
// the instance's side of service registration; package
// [github.com/leased/leased/grantor/registry] is the grantor's. Through a
// Client it subscribes to the registration's change events ([Client.Ends]),
// so that a revocation or a removal by gossip ends it at once: a user the
// server does not let subscribe there gets a permissions error on the
// connection's error handler, and the registration is found lost at its
// next renewal instead.
//
// Errors: [api.ErrInvalidRequest] for a registration that does not
// Validate, [kvlease.ErrInvalidOption] or [kvlease.ErrInvalidTiming] for
// keeper options that Keep would refuse (nothing sent either way); those
// of [kvlease.Acquire] (its [kvlease.ErrTooLarge] saying what a
// registration's attributes are, see [api.RegistrationTooLarge]) and
// [kvlease.Keep].
func Register(ctx context.Context, g kvlease.Grantor, reg api.Registration, holder string, ttl time.Duration,
	opts ...kvlease.KeeperOption) (*kvlease.Keeper, error) {
	if err := reg.Validate(); err != nil {
		return nil, err
	}
	// Refused now, as election.Campaign does, not after a grant that is
	// then released (with the instance registered by another, a bad
	// option was answered "held").
	hold, err := kvlease.NewHold(kvlease.WithKeeper(opts...))
	if err == nil {
		err = hold.Check(ttl)
	}
	if err != nil {
		return nil, err
	}
	l, err := kvlease.Acquire(ctx, g, reg.LeaseName(), holder, ttl, kvlease.WithAttributes(reg.Attributes()))
	if err != nil {
		return nil, api.RegistrationTooLarge(err)
	}
	// Through the service, the keeper also renews at once when the
	// registration's end is announced (revoked, removed by gossip) and
	// when the connection comes back ([Client.Ends]).
	hints, stopHints := context.WithCancel(context.WithoutCancel(ctx))
	if c, ok := g.(*Client); ok {
		if ends, err := c.Ends(hints, l.Name(), l.Token()); err == nil {
			opts = append(slices.Clip(opts), kvlease.WithRenewNow(ends))
		}
	}
	k, err := kvlease.Keep(context.WithoutCancel(ctx), l, opts...)
	if err != nil {
		stopHints()
		_ = l.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	context.AfterFunc(k.Context(), stopHints)
	return k, nil
}

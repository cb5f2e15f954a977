package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
)

// Ends returns a channel that receives when the service announces, on
// lease.events.v1.<name>, that the tenure of token has ended (released,
// revoked, expired) or that a newer tenure of name has begun. Pass it to
// [kvlease.WithRenewNow]: the keeper renews at once, is refused, and the
// lease is lost then instead of at its next renewal, up to D/3 later. An
// announcement is only a hint (anyone allowed to publish there can send
// one); the refused renewal is what ends the lease. The subscription
// lasts until ctx ends.
//
// It also receives when the connection comes back after it was lost: an
// end announced meanwhile was not heard, and the keeper's renewal, which
// would otherwise wait for its retry's backoff, finds out at once (a
// registration with 1 s of its validity left when a paused server
// resumed lapsed; found by an outside client).
//
// A user the server does not let subscribe to the subject gets a
// permissions error on the connection's error handler (nats.go reports it
// asynchronously); the lease is then found lost at its next renewal, as
// without Ends.
func (c *Client) Ends(ctx context.Context, name string, token kvlease.Token) (<-chan struct{}, error) {
	if err := kvlease.ValidateName(name); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	hint := func() {
		select {
		case ch <- struct{}{}:
		default: // one pending hint is enough
		}
	}
	sub, err := c.nc.Subscribe(api.SubjectEvents+name, func(m *nats.Msg) {
		var ev api.ChangeEvent
		if json.Unmarshal(m.Data, &ev) != nil || ev.Name != name {
			return
		}
		if kvlease.EventTypeOf(ev.Type).EndsTenure(kvlease.Token(ev.Token), token) {
			hint()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%w: subscribe to %s: %w", kvlease.ErrUnavailable, api.SubjectEvents+name, err)
	}
	back := c.nc.StatusChanged(nats.CONNECTED)
	go func() {
		for range back { // until RemoveStatusListener closes it
			hint()
		}
	}()
	context.AfterFunc(ctx, func() {
		_ = sub.Unsubscribe()
		c.nc.RemoveStatusListener(back)
	})
	// Once the server has the subscription, an end announced after Ends
	// returns is heard.
	fctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	_ = c.nc.FlushWithContext(fctx)
	return ch, nil
}

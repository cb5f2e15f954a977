package grantor

import (
	"context"
	"fmt"

	"github.com/leased/leased/grantor/api"
)

// A Handler answers one request of an endpoint: data is the request body
// (at most [Config.MaxRequestBytes]; decode it with [api.Decode]), ctx ends
// when the caller stops waiting or the service's request timeout passes.
// It returns the reply body, which the service encodes as JSON, or an error,
// which it answers with [api.ErrorBodyOf]'s code. Handlers run concurrently,
// up to [Config.MaxInFlight] across all endpoints.
type Handler func(ctx context.Context, data []byte) (any, error)

// An Extension serves verbs of its own beside the lease API, on the same
// micro service, with the same limits, metrics and spans: package
// [github.com/leased/leased/grantor/registry] serves service registration
// and discovery this way. An extension's subjects must not be the lease
// API's; the prefix of each (its subject up to the last dot, e.g. svc.v1)
// gets a catch-all endpoint that answers unknown verbs with
// invalid_argument.
type Extension interface {
	// Endpoints returns the extension's handlers by subject. [New] calls it
	// once; leases are the lease operations the extension may build on.
	Endpoints(leases Leases) map[string]Handler
	// Start is called by [Service.Start], after the service has replayed
	// the bucket and before it takes requests; an error fails Start.
	Start(ctx context.Context) error
	// Stop is called by [Service.Stop] once no request is in flight (and
	// by a failing Start if Start succeeded), at most once per Start.
	Stop()
}

// Leases are the service's own grant and release, with its checks of
// attributes, its per-holder limit and its accounting, for extensions
// whose verbs are leases under another name (a registration is a lease).
// They are safe for concurrent use.
type Leases interface {
	// Grant grants req; an absent TTL is the policy's default.
	Grant(ctx context.Context, req api.GrantRequest) (api.Lease, error)
	// Release ends the tenure req names.
	Release(ctx context.Context, req api.ReleaseRequest) error
	// MaxPayload is the NATS server's max payload: a reply, its body and
	// headers, must fit it (see [api.Page] for replies that page).
	MaxPayload() int64
}

// WithExtension adds ext's endpoints to the service, and starts and stops
// ext with it. A nil extension is an error.
func WithExtension(ext Extension) Option {
	return func(s *Service) error {
		if ext == nil {
			return fmt.Errorf("%w: nil extension", ErrConfig)
		}
		s.extensions = append(s.extensions, ext)
		return nil
	}
}

// extensionLeases is the Leases a Service gives its extensions.
type extensionLeases struct{ s *Service }

var _ Leases = extensionLeases{}

func (l extensionLeases) Grant(ctx context.Context, req api.GrantRequest) (api.Lease, error) {
	return l.s.grantLease(ctx, req)
}

func (l extensionLeases) Release(ctx context.Context, req api.ReleaseRequest) error {
	return l.s.releaseLease(ctx, req)
}

func (l extensionLeases) MaxPayload() int64 { return l.s.nc.MaxPayload() }

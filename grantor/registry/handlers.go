package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
)

// Endpoints returns the handlers of svc.v1.register, .deregister and
// .discover: registering is a grant (with the service's limits) of the
// registration's lease, deregistering its release. It implements
// [grantor.Extension]; the service calls it.
func (r *Registry) Endpoints(leases grantor.Leases) map[string]grantor.Handler {
	return map[string]grantor.Handler{
		api.SubjectRegister:   func(ctx context.Context, data []byte) (any, error) { return r.register(ctx, leases, data) },
		api.SubjectDeregister: func(ctx context.Context, data []byte) (any, error) { return r.deregister(ctx, leases, data) },
		api.SubjectDiscover:   func(ctx context.Context, data []byte) (any, error) { return r.discover(ctx, leases, data) },
	}
}

func (r *Registry) register(ctx context.Context, leases grantor.Leases, data []byte) (any, error) {
	var req api.RegisterRequest
	if err := api.Decode(data, &req); err != nil {
		return nil, err
	}
	reg := api.Registration{Service: req.Service, Instance: req.Instance, Addr: req.Addr, Node: req.Node, Meta: req.Meta}
	if err := reg.Validate(); err != nil {
		return nil, err
	}
	lease, err := leases.Grant(ctx, api.GrantRequest{Name: reg.LeaseName(), Holder: req.Holder, TTL: req.TTL, Attributes: reg.Attributes(),
		RequestID: req.RequestID, Secret: req.Secret})
	if err != nil {
		return nil, api.RegistrationTooLarge(err)
	}
	return lease, nil
}

func (r *Registry) deregister(ctx context.Context, leases grantor.Leases, data []byte) (any, error) {
	var req api.DeregisterRequest
	if err := api.Decode(data, &req); err != nil {
		return nil, err
	}
	if err := errors.Join(api.ValidateServiceName("service", req.Service), api.ValidateServiceName("instance", req.Instance)); err != nil {
		return nil, err
	}
	reg := api.Registration{Service: req.Service, Instance: req.Instance}
	err := leases.Release(ctx, api.ReleaseRequest{Name: reg.LeaseName(), Holder: req.Holder, Token: req.Token,
		Revision: req.Revision, Secret: req.Secret})
	if err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

func (r *Registry) discover(ctx context.Context, leases grantor.Leases, data []byte) (any, error) {
	var req api.DiscoverRequest
	if err := api.Decode(data, &req); err != nil {
		return nil, err
	}
	if err := api.ValidateServiceName("service", req.Service); err != nil {
		return nil, err
	}
	if req.Limit < 0 {
		return nil, fmt.Errorf("%w: limit %d (0 for no limit)", api.ErrInvalidRequest, req.Limit)
	}
	// In instance order (Discover sorts them): a page begins after After.
	ins := r.Discover(ctx, req.Service, req.MaxSuspicion)
	ins = ins[sort.Search(len(ins), func(i int) bool { return ins[i].Instance > req.After }):]
	out := discoverPage{Threshold: r.threshold}
	var err error
	out.Instances, out.More, err = api.Page(ins, req.Limit, leases.MaxPayload(),
		func(in api.Instance) ([]byte, error) { return json.Marshal(in) },
		func(n int) error {
			return fmt.Errorf("%w: the %d instances of %s exceed the server's max payload: ask for pages (limit)",
				api.ErrTooLarge, n, req.Service)
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// discoverPage is the wire form of api.DiscoverReply with each instance
// encoded once, as the page measured it against the reply's size.
type discoverPage struct {
	Instances []json.RawMessage `json:"instances"`
	Threshold float64           `json:"threshold"`
	More      bool              `json:"more,omitempty"`
}

package grantor

import (
	"context"
	"time"

	"github.com/leased/leased/kvlease"
)

// RegisterRequest is the body of svc.v1.register.
type RegisterRequest struct {
	Service  string            `json:"service"`
	Instance string            `json:"instance"`
	Addr     string            `json:"addr"`
	Node     string            `json:"node,omitempty"`
	Meta     map[string]string `json:"meta,omitempty"`
	Holder   string            `json:"holder"`
	TTL      *Duration         `json:"ttl,omitempty"` // as in GrantRequest
}

// DeregisterRequest is the body of svc.v1.deregister.
type DeregisterRequest struct {
	Service  string `json:"service"`
	Instance string `json:"instance"`
	Holder   string `json:"holder"`
	Token    uint64 `json:"token"`
	Revision uint64 `json:"revision"`
	Secret   string `json:"secret"`
}

// DiscoverRequest is the body of svc.v1.discover.
type DiscoverRequest struct {
	Service string `json:"service"`
	// MaxSuspicion > 0 leaves out instances whose node's suspicion is at
	// or above it.
	MaxSuspicion float64 `json:"max_suspicion,omitempty"`
}

// DiscoverReply is the body of a svc.v1.discover reply.
type DiscoverReply struct {
	Instances []Instance `json:"instances"`
	// Threshold is the suspicion level at which this grantor calls an
	// instance suspect.
	Threshold float64 `json:"threshold"`
}

func (s *Service) register(ctx context.Context, data []byte) (any, error) {
	var req RegisterRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	reg := Registration{Service: req.Service, Instance: req.Instance, Addr: req.Addr, Node: req.Node, Meta: req.Meta}
	if err := reg.Validate(); err != nil {
		return nil, err
	}
	body, err := encodeJSON(GrantRequest{Name: reg.LeaseName(), Holder: req.Holder, TTL: req.TTL, Attributes: reg.attributes()})
	if err != nil {
		return nil, err
	}
	return s.grant(ctx, body)
}

func (s *Service) deregister(ctx context.Context, data []byte) (any, error) {
	var req DeregisterRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	reg := Registration{Service: req.Service, Instance: req.Instance, Addr: "-"}
	if err := reg.Validate(); err != nil {
		return nil, err
	}
	body, err := encodeJSON(ReleaseRequest{Name: reg.LeaseName(), Holder: req.Holder, Token: req.Token,
		Revision: req.Revision, Secret: req.Secret})
	if err != nil {
		return nil, err
	}
	return s.release(ctx, body)
}

func (s *Service) discover(_ context.Context, data []byte) (any, error) {
	var req DiscoverRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if err := (Registration{Service: req.Service, Instance: "x", Addr: "-"}).Validate(); err != nil {
		return nil, err
	}
	return DiscoverReply{Instances: s.registry.Discover(req.Service, req.MaxSuspicion), Threshold: s.threshold}, nil
}

// Register registers an instance through g (a kvlease.Store, or a Client)
// and keeps the registration renewed until the returned keeper is closed
// (which deregisters) or the registration is lost.
func Register(ctx context.Context, g kvlease.Grantor, reg Registration, holder string, ttl time.Duration,
	opts ...kvlease.KeeperOption) (*kvlease.Keeper, error) {
	if err := reg.Validate(); err != nil {
		return nil, err
	}
	l, err := kvlease.Acquire(ctx, g, reg.LeaseName(), holder, ttl, kvlease.WithAttributes(reg.attributes()))
	if err != nil {
		return nil, err
	}
	k, err := kvlease.Keep(context.WithoutCancel(ctx), l, opts...)
	if err != nil {
		_ = l.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return k, nil
}

// Discover asks the service for the instances of service.
func (c *Client) Discover(ctx context.Context, service string, maxSuspicion float64) (DiscoverReply, error) {
	var out DiscoverReply
	err := c.call(ctx, SubjectDiscover, DiscoverRequest{Service: service, MaxSuspicion: maxSuspicion}, &out)
	return out, err
}

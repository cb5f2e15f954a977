package grantor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/membership"
)

// Service registration: an instance registers as the lease
// "svc.<service>.<instance>", with its address, metadata and the gossip node
// it lives on in the lease's attributes, and keeps it renewed. If the
// instance dies its registration lapses by TTL; if gossip declares its node
// dead first, the grantor removes it at once (cause "gossip"). That applies
// to registrations only, never to other leases: a gossip false positive may
// cost availability, never safety.

// RegistrationPrefix begins every registration's lease name.
const RegistrationPrefix = "svc."

// Reserved attribute keys of a registration; user metadata is stored under
// "meta.<key>".
const (
	attrAddr = "addr"
	attrNode = "node"
	attrMeta = "meta."
)

// Causes of a registration's removal.
const (
	CauseDeregistered = "deregistered" // the instance released it
	CauseTTL          = "ttl"          // it lapsed: no renewal in time
	CauseGossip       = "gossip"       // gossip declared its node dead
	CauseRevoked      = "revoked"      // an operator revoked it
)

// gossipReason prefixes the revocation reason the registry writes.
const gossipReason = "gossip: node declared dead: "

// Registration describes one instance of a service.
type Registration struct {
	Service  string            `json:"service"`
	Instance string            `json:"instance"`
	Addr     string            `json:"addr"`
	Node     string            `json:"node,omitempty"` // gossip node the instance lives on
	Meta     map[string]string `json:"meta,omitempty"`
}

// LeaseName is the registration's lease name.
func (r Registration) LeaseName() string {
	return RegistrationPrefix + r.Service + "." + r.Instance
}

// Validate checks the registration's names and address.
func (r Registration) Validate() error {
	for what, v := range map[string]string{"service": r.Service, "instance": r.Instance} {
		if v == "" || strings.Contains(v, ".") {
			return fmt.Errorf("%w: %s %q must be non-empty and contain no dots", ErrInvalidRequest, what, v)
		}
	}
	if err := kvlease.ValidateName(r.LeaseName()); err != nil {
		return err
	}
	if r.Addr == "" {
		return fmt.Errorf("%w: an address is required", ErrInvalidRequest)
	}
	return nil
}

// attributes encodes r into lease attributes.
func (r Registration) attributes() map[string]string {
	a := map[string]string{attrAddr: r.Addr}
	if r.Node != "" {
		a[attrNode] = r.Node
	}
	for k, v := range r.Meta {
		a[attrMeta+k] = v
	}
	return a
}

// registrationOf decodes a lease record; ok is false for other leases.
func registrationOf(rec kvlease.Record) (Registration, bool) {
	rest, ok := strings.CutPrefix(rec.Name, RegistrationPrefix)
	if !ok {
		return Registration{}, false
	}
	svc, inst, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(inst, ".") {
		return Registration{}, false
	}
	r := Registration{Service: svc, Instance: inst, Addr: rec.Attributes[attrAddr], Node: rec.Attributes[attrNode]}
	for k, v := range rec.Attributes {
		if m, ok := strings.CutPrefix(k, attrMeta); ok {
			if r.Meta == nil {
				r.Meta = map[string]string{}
			}
			r.Meta[m] = v
		}
	}
	return r, true
}

// Instance is a registered instance as discovery reports it.
type Instance struct {
	Registration
	Holder string `json:"holder"`
	Token  uint64 `json:"token"`
	// ExpiresAt is when the registration lapses unless renewed (server clock).
	ExpiresAt time.Time `json:"expires_at"`
	// Gossip is true if the instance's node is known to this grantor's
	// gossip; Suspicion is then its continuous suspicion level (phi; 0 is
	// healthy, membership.MaxSuspicion is declared dead) and Suspect says
	// whether it is at or above the threshold.
	Gossip    bool    `json:"gossip"`
	Suspicion float64 `json:"suspicion"`
	Suspect   bool    `json:"suspect"`
}

// Change types.
const (
	ChangeAdded   = "added"
	ChangeRemoved = "removed"
)

// Change is a registration added or removed (renewals are not changes).
type Change struct {
	Type     string   `json:"type"` // ChangeAdded or ChangeRemoved
	Instance Instance `json:"instance"`
	Cause    string   `json:"cause,omitempty"` // for "removed": deregistered, ttl, gossip, revoked
	Time     time.Time
}

// Gossip is what the registry needs from membership; *membership.Node
// implements it.
type Gossip interface {
	Member(name string) (membership.Member, bool)
	Events() <-chan membership.Event
}

var _ Gossip = (*membership.Node)(nil)

// Registry keeps the registrations of a lease bucket in memory, current by
// watching the bucket (no polling), answers discovery with gossip suspicion
// levels, and removes the registrations of nodes gossip declares dead.
type Registry struct {
	store     *kvlease.Store
	gossip    Gossip // nil: no gossip
	threshold float64
	log       *slog.Logger

	mu        sync.Mutex
	instances map[string]map[string]kvlease.Record // service → instance → record
	watchers  map[chan Change]string               // subscriber → service ("" for all)

	watcher *kvlease.Watcher
	done    chan struct{}
}

// NewRegistry starts following the registrations in store, and, with a
// gossip node, their nodes' health. threshold is the suspicion level at and
// above which an instance is reported suspect. It returns once the current
// registrations are loaded.
func NewRegistry(ctx context.Context, store *kvlease.Store, gossip Gossip, threshold float64, log *slog.Logger) (*Registry, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w, err := watchWhenReady(ctx, store, RegistrationPrefix, log)
	if err != nil {
		return nil, err
	}
	r := &Registry{
		store: store, gossip: gossip, threshold: threshold, log: log,
		instances: map[string]map[string]kvlease.Record{},
		watchers:  map[chan Change]string{},
		watcher:   w,
		done:      make(chan struct{}),
	}
	go r.follow()
	if gossip != nil {
		go r.reap()
	}
	select {
	case <-w.Synced():
	case <-ctx.Done():
		r.Stop()
		return nil, ctx.Err()
	}
	return r, nil
}

// Stop stops following the bucket and gossip.
func (r *Registry) Stop() {
	r.watcher.Stop()
	<-r.done
}

func (r *Registry) follow() {
	defer close(r.done)
	for ev := range r.watcher.Events() {
		rec := ev.Record
		if rec == nil {
			rec = &kvlease.Record{Name: ev.Name, Holder: ev.Holder, Token: ev.Token}
		}
		reg, ok := registrationOf(*rec)
		if !ok {
			continue
		}
		r.mu.Lock()
		byInst := r.instances[reg.Service]
		ch := Change{Time: ev.Time}
		switch {
		case ev.Type.Ends():
			if byInst != nil {
				if cur, ok := byInst[reg.Instance]; ok {
					ch.Instance = r.instance(cur)
				}
				delete(byInst, reg.Instance)
				if len(byInst) == 0 {
					delete(r.instances, reg.Service)
				}
			}
			if ch.Instance.Service == "" {
				ch.Instance = r.instance(*rec)
			}
			ch.Type, ch.Cause = ChangeRemoved, causeOf(ev)
		default:
			if byInst == nil {
				byInst = map[string]kvlease.Record{}
				r.instances[reg.Service] = byInst
			}
			_, existed := byInst[reg.Instance]
			byInst[reg.Instance] = *rec
			if existed && ev.Type == kvlease.EventRenewed {
				r.mu.Unlock()
				continue // a renewal changes nothing a watcher acts on
			}
			ch.Type, ch.Instance = ChangeAdded, r.instance(*rec)
		}
		r.notifyLocked(ch)
		r.mu.Unlock()
	}
}

func causeOf(ev kvlease.Event) string {
	switch {
	case ev.Type == kvlease.EventReleased:
		return CauseDeregistered
	case ev.Type == kvlease.EventExpired:
		return CauseTTL
	case strings.HasPrefix(ev.Reason, gossipReason):
		return CauseGossip
	default:
		return CauseRevoked
	}
}

// reap removes the registrations of nodes gossip declares dead.
func (r *Registry) reap() {
	for {
		select {
		case ev, ok := <-r.gossip.Events():
			if !ok {
				return
			}
			if ev.Type == membership.EventDead {
				r.removeNode(ev.Member.Name)
			}
		case <-r.done:
			return
		}
	}
}

func (r *Registry) removeNode(node string) {
	r.mu.Lock()
	var names []string
	for _, byInst := range r.instances {
		for _, rec := range byInst {
			if rec.Attributes[attrNode] == node {
				names = append(names, rec.Name)
			}
		}
	}
	r.mu.Unlock()
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := r.store.Revoke(ctx, name, gossipReason+node)
		cancel()
		switch {
		case err == nil:
			r.log.Info("removed registration of a dead node", "lease", name, "node", node, "cause", CauseGossip)
		case errors.Is(err, kvlease.ErrNotFound): // gone already, or another grantor node was first
		default:
			r.log.Warn("could not remove registration of a dead node", "lease", name, "node", node, "err", err)
		}
	}
}

// instance describes rec with its node's current suspicion. Called with mu held.
func (r *Registry) instance(rec kvlease.Record) Instance {
	reg, _ := registrationOf(rec)
	in := Instance{Registration: reg, Holder: rec.Holder, Token: uint64(rec.Token), ExpiresAt: rec.ExpiresAt()}
	if r.gossip != nil && reg.Node != "" {
		if m, ok := r.gossip.Member(reg.Node); ok {
			in.Gossip, in.Suspicion = true, m.Suspicion
			in.Suspect = m.Suspicion >= r.threshold
		}
	}
	return in
}

// Discover returns the instances of service, sorted by instance name, with
// their suspicion levels. maxSuspicion > 0 leaves out instances whose node is
// at or above it (instances without gossip are kept: nothing is known
// against them).
func (r *Registry) Discover(service string, maxSuspicion float64) []Instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Instance, 0, len(r.instances[service]))
	for _, inst := range slices.Sorted(maps.Keys(r.instances[service])) {
		in := r.instance(r.instances[service][inst])
		if maxSuspicion > 0 && in.Gossip && in.Suspicion >= maxSuspicion {
			continue
		}
		out = append(out, in)
	}
	return out
}

// Watch delivers changes to the registrations of service ("" for all) until
// ctx ends. A subscriber that falls 64 changes behind loses the oldest.
func (r *Registry) Watch(ctx context.Context, service string) <-chan Change {
	ch := make(chan Change, 64)
	r.mu.Lock()
	r.watchers[ch] = service
	r.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-r.done:
		}
		r.mu.Lock()
		delete(r.watchers, ch)
		close(ch)
		r.mu.Unlock()
	}()
	return ch
}

func (r *Registry) notifyLocked(c Change) {
	for ch, svc := range r.watchers {
		if svc != "" && svc != c.Instance.Service {
			continue
		}
		for {
			select {
			case ch <- c:
			default:
				select { // full: drop the oldest
				case <-ch:
				default:
				}
				continue
			}
			break
		}
	}
}

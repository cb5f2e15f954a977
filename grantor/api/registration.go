package api

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/redact"
)

// Service registration on the wire: an instance registers as the lease
// "svc.<service>.<instance>", with its address, metadata and the gossip node
// it lives on in the lease's attributes (docs/api.md#service-registration).

// RegistrationPrefix begins every registration's lease name.
const RegistrationPrefix = "svc."

// Reserved attribute keys of a registration; user metadata is stored under
// "meta.<key>".
const (
	attrAddr = "addr"
	attrNode = "node"
	attrMeta = "meta."
)

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

// Validate checks the registration: its service and instance names
// ([ValidateServiceName]), its address ([ValidateAddr]) and its metadata
// keys (non-empty). Every refusal is [ErrInvalidRequest].
func (r Registration) Validate() error {
	if err := errors.Join(ValidateServiceName("service", r.Service), ValidateServiceName("instance", r.Instance),
		ValidateAddr(r.Addr)); err != nil {
		return err
	}
	if err := kvlease.ValidateName(r.LeaseName()); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err) // too long; still kvlease.ErrInvalidName
	}
	if r.Node != "" {
		// A gossip node name, as membership takes one: anything went
		// (900 bytes, control characters; found by an outside client).
		if err := kvlease.ValidateHolder(r.Node); err != nil || len(r.Node) > MaxNodeLen {
			return fmt.Errorf("%w: node %q: want at most %d bytes of printable UTF-8", ErrInvalidRequest, r.Node, MaxNodeLen)
		}
	}
	for k := range r.Meta {
		if k == "" {
			return fmt.Errorf("%w: a metadata key is empty", ErrInvalidRequest)
		}
	}
	return nil
}

// RegistrationTooLarge adds to a refusal of a registration's attributes
// (an error that is [ErrTooLarge] or [kvlease.ErrTooLarge]) what they are,
// since the limits count attributes, not metadata: "21 attributes, limit
// 16" answered 20 metadata keys (found by an outside client). Other
// errors, and nil, it returns as they are.
func RegistrationTooLarge(err error) error {
	if !errors.Is(err, kvlease.ErrTooLarge) {
		return err
	}
	return fmt.Errorf("%w (a registration's attributes are its addr, its node if it has one, and meta.KEY for each metadata key)", err)
}

// MaxNodeLen is the longest node name of a registration: the longest
// gossip node name (membership.MaxNameLen).
const MaxNodeLen = 128

// serviceNameChars are the characters of service and instance names: a
// lease name's, without the dot that separates them.
const serviceNameChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-/_="

// ValidateServiceName checks a service or instance name (what says which,
// for the message): one token of a lease name, without dots.
func ValidateServiceName(what, v string) error {
	if v == "" || strings.Contains(v, ".") {
		return fmt.Errorf("%w: %s %q: want a non-empty name without dots", ErrInvalidRequest, what, v)
	}
	for i, c := range v {
		if c >= utf8.RuneSelf || !strings.ContainsRune(serviceNameChars, c) {
			return fmt.Errorf("%w: %s %q has %q at byte %d (allowed: ASCII letters and digits, - / _ =; no wildcards)",
				ErrInvalidRequest, what, v, c, i)
		}
	}
	return nil
}

// ValidateAddr checks an instance's address: host:port, with a host (a
// host name or an IP address) and a port number.
func ValidateAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host == "" {
		err = errors.New("missing host")
	}
	for i, r := range host {
		if err == nil && !strings.ContainsRune(hostChars, r) {
			// Control characters went into discover's output and the
			// registering command's own line (found by an outside client).
			err = fmt.Errorf("host has %q at byte %d: want a host name or an IP address", r, i)
		}
	}
	if err == nil {
		err = hostShape(host)
	}
	if err == nil {
		var n int
		if n, err = strconv.Atoi(port); err == nil && (n < 1 || n > 65535) {
			err = errors.New("port out of range")
		}
	}
	if err != nil {
		return fmt.Errorf("%w: addr %q: want HOST:PORT: %v", ErrInvalidRequest, addr, err)
	}
	return nil
}

// hostShape checks that host, of hostChars only, is an IP address or a
// host name: dot-separated labels of 1 to 63 letters, digits, '-' (not
// first or last) or '_', 253 bytes at most, not two or more labels all of
// digits (so that 1.2.3.4.5 and 999.1.1.1 are neither, while a container's
// host name of 12 digits is one); a..b and -a passed the check by
// characters alone (found in review).
func hostShape(host string) error {
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if strings.ContainsAny(host, ":%") {
		return fmt.Errorf("host %q is not an IP address", host)
	}
	name := strings.TrimSuffix(host, ".") // a fully qualified name
	if len(name) > 253 {
		return fmt.Errorf("host name of %d bytes: at most 253", len(name))
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("host %q: want a host name (labels of 1 to 63 characters, no '-' first or last) or an IP address", host)
		}
	}
	for _, l := range labels {
		if len(labels) == 1 || strings.Trim(l, "0123456789") != "" {
			return nil // a host name (a container's, 12 digits, is one label: review)
		}
	}
	return fmt.Errorf("host %q is neither an IP address nor a host name (dotted numbers)", host)
}

// hostChars are those of host names and IP addresses (an IPv6 zone too).
const hostChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_:%"

// Attributes encodes r into the attributes of its lease.
func (r Registration) Attributes() map[string]string {
	a := map[string]string{attrAddr: r.Addr}
	if r.Node != "" {
		a[attrNode] = r.Node
	}
	for k, v := range r.Meta {
		a[attrMeta+k] = v
	}
	return a
}

// RegistrationOf decodes a lease record; ok is false for other leases. A
// lease under svc. granted other than by registering may decode to a
// Registration that does not Validate (no address, say).
func RegistrationOf(rec kvlease.Record) (Registration, bool) {
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

// RegisterRequest is the body of svc.v1.register.
type RegisterRequest struct {
	Service  string            `json:"service"`
	Instance string            `json:"instance"`
	Addr     string            `json:"addr"`
	Node     string            `json:"node,omitempty"`
	Meta     map[string]string `json:"meta,omitempty"`
	Holder   string            `json:"holder"`
	TTL      *Duration         `json:"ttl,omitempty"` // as in GrantRequest
	// RequestID and Secret: as in GrantRequest.
	RequestID string `json:"request_id,omitempty"`
	Secret    string `json:"secret,omitempty"`
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

// Format prints req with its secret redacted, as [GrantRequest.Format].
func (req RegisterRequest) Format(f fmt.State, verb rune) {
	type plain RegisterRequest
	p := plain(req)
	redact.Format(f, verb, &p, &p.Secret)
}

// Format prints req with its secret redacted, as [GrantRequest.Format].
func (req DeregisterRequest) Format(f fmt.State, verb rune) {
	type plain DeregisterRequest
	p := plain(req)
	redact.Format(f, verb, &p, &p.Secret)
}

// DiscoverRequest is the body of svc.v1.discover.
//
// Without Limit the reply holds every instance of Service, or is refused
// too_large if that exceeds the NATS server's max payload. With Limit it
// holds at most that many, in instance order after After, fewer if more
// would not fit in one message, and More says whether any were left out:
// send again with After set to the last instance returned. Each page is a
// read of its own, as a list's (see [ListRequest]).
type DiscoverRequest struct {
	Service string `json:"service"`
	// MaxSuspicion > 0 leaves out instances whose node's suspicion is at
	// or above it.
	MaxSuspicion float64 `json:"max_suspicion,omitempty"`
	After        string  `json:"after,omitempty"`
	Limit        int     `json:"limit,omitempty"`
}

// DiscoverReply is the body of a svc.v1.discover reply.
type DiscoverReply struct {
	Instances []Instance `json:"instances"`
	// Threshold is the suspicion level at which this grantor calls an
	// instance suspect; 0 when it has no gossip (then no instance is).
	Threshold float64 `json:"threshold"`
	// More says that instances after the last one returned were left out.
	More bool `json:"more,omitempty"`
}

package grantor

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
)

// ErrConfig is wrapped by every error [Config.Validate], [Config.ValidateFor]
// and [New] return for a bad config or option.
var ErrConfig = errors.New("grantor: invalid config")

// Config is the service's own policy: what it applies before a request
// reaches the store. The durations a lease may have and the grantor margin
// are the store's ([kvlease.WithDurationRange], [kvlease.WithGrantorMargin]):
// the service reads them from the [kvlease.Store] it is given
// ([kvlease.Store.DurationRange], [kvlease.Store.GrantorMargin]) and keeps
// no copy that could disagree.
type Config struct {
	// DefaultDuration is D for a grant that names none; it must lie in the
	// store's DurationRange. Default 10 s: renewing every D/3 ≈ 3.3 s
	// ([kvlease.DefaultRenewInterval]) leaves two attempts before the
	// holder's margin of D/10 = 1 s ([kvlease.DefaultHolderMargin]), and a
	// crashed holder's lease is free after ceil(D + m_g) = 11 s with the
	// default m_g.
	DefaultDuration time.Duration
	// MaxAttributes is the most attributes a lease may carry. Default 16:
	// attributes are labels (an address, a version, a zone), not a payload.
	MaxAttributes int
	// MaxAttributeBytes bounds the total size of keys and values. Default
	// 1 KiB = MaxAttributes × 64 bytes (a 16-byte key, a 48-byte value).
	MaxAttributeBytes int
	// MaxLeasesPerHolder bounds the live leases one holder may have, counted
	// from the bucket by a watcher (a soft limit: grants in flight together
	// may pass it by as many as they are). 0 means no limit. Default 1000: far more than one
	// process holds at once, so a holder that reaches it is leaking
	// leases, each a key that every watcher of the bucket replays.
	MaxLeasesPerHolder int
	// MaxLeases bounds the live leases of the bucket: a grant of a lease
	// that is not live is refused (limit_exceeded) while the bucket has
	// that many, counted from the bucket by a watcher (a soft limit, as
	// MaxLeasesPerHolder is). 0 means no limit.
	// Default 250,000: every live lease costs the grantor's node memory
	// (about 7 KiB of RSS at 100,000 in the README's measurements), and
	// the service cannot tell its callers apart (a holder name is the
	// caller's to choose), so this is what keeps one caller that grants
	// leases in a loop from taking the node's memory. Size it to the node.
	MaxLeases int
	// ReplyPrefixes are the prefixes a request's reply subject must begin
	// with for the service to answer it ([api.ReplySubjectOK]): its
	// callers' inboxes. Default [api.DefaultInboxPrefixes], "_INBOX", which
	// covers nats.go's default inbox and prefixes like "_INBOX_app"; name
	// yours if your clients use others. A request with any other reply
	// subject is dropped: the service would publish there as its own user.
	ReplyPrefixes []string
	// MaxRequestBytes bounds a request body; at least 256. Default 16 KiB
	// > 6 × (MaxAttributeBytes + [kvlease.MaxNameLen] + [kvlease.MaxHolderLen])
	// ≈ 9 KiB: the largest grant fits even with every byte of its strings
	// JSON-escaped (\u00XX, 6 bytes a byte).
	MaxRequestBytes int
	// MaxInFlight bounds requests handled at once, across endpoints; at
	// least 1. Default 512 ≥ rate × latency (Little's law) = 50 000
	// requests/s × 10 ms: more than one bucket commits (README's
	// Performance: under 40 000 writes/s) at a replicated write's latency,
	// so the bucket's pipeline stays full; each costs one goroutine.
	MaxInFlight int
}

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	return Config{
		DefaultDuration:    10 * time.Second,
		MaxAttributes:      16,
		MaxAttributeBytes:  16 * 64,
		MaxLeasesPerHolder: 1000,
		MaxLeases:          250_000,
		MaxRequestBytes:    16 << 10,
		MaxInFlight:        512,
	}
}

// Validate checks each value and how they relate, as far as c alone can
// tell: DefaultDuration against the server's 1 s floor.
// [Config.ValidateFor] also checks it against a store's range.
func (c Config) Validate() error { return configError(c.problems()) }

// ValidateFor is [Config.Validate] for a service on a store whose
// [kvlease.Store.DurationRange] is [minD, maxD]: DefaultDuration must also
// lie in it, or every grant that names no duration would be refused. [New]
// calls it with its store's range; a command can call it on its flags
// before it opens the store.
func (c Config) ValidateFor(minD, maxD time.Duration) error {
	errs := c.problems()
	if d := c.DefaultDuration; d < minD || d > maxD {
		errs = append(errs, fmt.Errorf("default duration %v is outside the store's range [%v, %v]", d, minD, maxD))
	}
	return configError(errs)
}

func (c Config) problems() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.DefaultDuration < kvlease.MinDuration {
		bad("default duration %v is below the server's 1 s TTL floor", c.DefaultDuration)
	}
	if c.MaxAttributes < 0 || c.MaxAttributeBytes < 0 || c.MaxLeasesPerHolder < 0 || c.MaxLeases < 0 {
		bad("negative limit")
	}
	if c.MaxRequestBytes < 256 {
		bad("request size limit %d bytes is too small for a request", c.MaxRequestBytes)
	}
	if c.MaxInFlight < 1 {
		bad("max in flight %d must be at least 1", c.MaxInFlight)
	}
	for _, p := range c.ReplyPrefixes {
		// An empty prefix would let every reply subject through.
		if p == "" || strings.ContainsAny(p, "*> \t") || !api.ReplySubjectOK(p+"x", []string{p}) {
			bad("reply prefix %q: want the beginning of an inbox subject, such as _INBOX", p)
		}
	}
	return errs
}

func configError(errs []error) error {
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

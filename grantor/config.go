package grantor

import (
	"errors"
	"fmt"
	"time"

	"github.com/leased/leased/kvlease"
)

// ErrConfig is wrapped by every error [Config.Validate] returns.
var ErrConfig = errors.New("grantor: invalid config")

// Config is the grantor's policy.
type Config struct {
	// MinDuration is the shortest lease granted. Default and floor: 1 s, the
	// server's TTL resolution.
	MinDuration time.Duration
	// MaxDuration is the longest lease granted. Default 1 h.
	MaxDuration time.Duration
	// DefaultDuration applies when a request names none. Default 10 s.
	DefaultDuration time.Duration
	// GrantorMargin (m_g) is added to every duration before rounding up to
	// whole seconds for the server TTL. Default 1 s: it absorbs a forward
	// step of the server's wall clock of up to 1 s.
	GrantorMargin time.Duration
	// MaxAttributes is the most attributes a lease may carry. Default 16.
	MaxAttributes int
	// MaxAttributeBytes bounds the total size of keys and values. Default 1 KiB.
	MaxAttributeBytes int
	// MaxLeasesPerHolder bounds the live leases one holder may have, counted
	// from the bucket by a watcher (a soft limit: concurrent grants may pass
	// it by a few). 0 means no limit. Default 1000.
	MaxLeasesPerHolder int
	// MaxRequestBytes bounds a request body. Default 16 KiB.
	MaxRequestBytes int
	// MaxInFlight bounds requests handled at once, across endpoints.
	// Default 512: enough to keep a replicated bucket's pipeline full.
	MaxInFlight int
}

// DefaultConfig returns the defaults documented on each field.
func DefaultConfig() Config {
	return Config{
		MinDuration:        kvlease.MinDuration,
		MaxDuration:        kvlease.DefaultMaxDuration,
		DefaultDuration:    10 * time.Second,
		GrantorMargin:      kvlease.DefaultGrantorMargin,
		MaxAttributes:      16,
		MaxAttributeBytes:  1 << 10,
		MaxLeasesPerHolder: 1000,
		MaxRequestBytes:    16 << 10,
		MaxInFlight:        512,
	}
}

// Validate checks each value and how they relate.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.MinDuration < kvlease.MinDuration {
		bad("minimum duration %v is below the server's 1 s TTL floor", c.MinDuration)
	}
	if c.MaxDuration < c.MinDuration {
		bad("maximum duration %v is below the minimum %v", c.MaxDuration, c.MinDuration)
	}
	if c.DefaultDuration < c.MinDuration || c.DefaultDuration > c.MaxDuration {
		bad("default duration %v is outside [%v, %v]", c.DefaultDuration, c.MinDuration, c.MaxDuration)
	}
	if c.GrantorMargin < 0 {
		bad("negative grantor margin %v", c.GrantorMargin)
	}
	if c.MaxAttributes < 0 || c.MaxAttributeBytes < 0 || c.MaxLeasesPerHolder < 0 {
		bad("negative limit")
	}
	if c.MaxRequestBytes < 256 {
		bad("request size limit %d bytes is too small for a request", c.MaxRequestBytes)
	}
	if c.MaxInFlight < 1 {
		bad("max in flight %d must be at least 1", c.MaxInFlight)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// StoreOptions returns the kvlease options that enforce c's durations and
// margin at the store.
func (c Config) StoreOptions() []kvlease.Option {
	return []kvlease.Option{
		kvlease.WithDurationRange(c.MinDuration, c.MaxDuration),
		kvlease.WithGrantorMargin(c.GrantorMargin),
	}
}

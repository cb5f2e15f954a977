package kvlease

import (
	"fmt"
	"time"
)

// The safety arithmetic (docs/safety.md). Pure functions, table-tested.

const (
	// MinDuration is the shortest lease the server can keep: NATS per-message
	// TTLs are whole seconds and anything under 1 s is rejected.
	MinDuration = time.Second
	// DefaultMaxDuration is the default upper bound on a lease's duration.
	DefaultMaxDuration = time.Hour
	// DefaultGrantorMargin is added to every duration before it is rounded
	// up to the server TTL. The server counts TTLs on its wall clock, so a
	// forward step of that clock brings every expiry forward by the step;
	// the grantor margin absorbs a step of up to this much (docs/safety.md,
	// "Two clocks").
	DefaultGrantorMargin = time.Second
	// DefaultClockRate is the assumed bound ρ on the rate difference between
	// the holder's and the server's clocks: 1e-3, ten times what commodity
	// quartz drifts, so that unmeasured clocks are covered.
	DefaultClockRate = 1e-3
)

// ServerTTL returns the TTL the grantor stores for a lease of duration d:
// d + grantorMargin rounded up to whole seconds. NATS truncates a TTL to whole
// seconds, and truncation would expire a lease early, so we round up.
func ServerTTL(d, grantorMargin time.Duration) time.Duration {
	t := d + grantorMargin
	if r := t % time.Second; r != 0 {
		t += time.Second - r
	}
	return t
}

// RenewalCutoff returns how long after the send of a grant or renewal of
// duration d a Store still renews it: the server TTL less ρ of it for the
// rates of the clocks ([DefaultClockRate]) and less the guard before its
// expiry (a renewal that lands as the expiry timer fires is rolled up by
// the marker; DESIGN §2 item 8). A renewal later than that is refused as
// too late ([ErrNotFound]). A holder keeping its deadline renews before it
// as long as its margin and the grantor's together exceed the 100 ms guard
// (the defaults: 1.1 s at least); with [WithGrantorMargin](0) and a holder
// margin under 100 ms its last renewals before its deadline are refused,
// the lease lost early (never held too long). A client that keeps no
// deadline (a raw API caller) must renew before this.
func RenewalCutoff(d, grantorMargin time.Duration) time.Duration {
	ttl := ServerTTL(d, grantorMargin)
	var sent time.Time // the Store's own arithmetic, from a send at 0
	return sureUntil(sent, ttl).Sub(sent) - renewGuard(ttl)
}

// HolderValidity returns how long after t0 (the monotonic time read just
// before the grant or renewal was sent) the holder may act: d·(1−ρ) − margin.
// It is ≤ 0 when the margins leave nothing.
func HolderValidity(d time.Duration, rho float64, margin time.Duration) time.Duration {
	return time.Duration(float64(d)*(1-rho)) - margin
}

// DefaultHolderMargin returns the holder margin used when none is given:
// d/10, at least 100 ms and at most 2 s. It covers the time between a Check
// and the effect it guards reaching the resource.
func DefaultHolderMargin(d time.Duration) time.Duration {
	return min(max(d/10, 100*time.Millisecond), 2*time.Second)
}

// DefaultRenewInterval returns d/3: two renewals can fail before the holder
// deadline, and each has a third of the lease to complete.
func DefaultRenewInterval(d time.Duration) time.Duration { return d / 3 }

// ValidateWindow checks that a holder with margin m_h and clock-rate bound
// ρ has a positive validity window in a lease of duration d.
func ValidateWindow(d, margin time.Duration, rho float64) error {
	if err := validateRate(rho); err != nil {
		return err
	}
	if err := validateMargin(margin); err != nil {
		return err
	}
	if HolderValidity(d, rho, margin) <= 0 {
		return fmt.Errorf("%w: holder margin %v leaves no validity in a %v lease", ErrInvalidTiming, margin, d)
	}
	return nil
}

// validateRate checks a clock-rate bound ρ on its own ([ValidateWindow],
// [WithClockRate]).
func validateRate(rho float64) error {
	if !(rho >= 0 && rho < 0.1) { // also refuses NaN
		return fmt.Errorf("%w: clock-rate bound %g outside [0, 0.1)", ErrInvalidTiming, rho)
	}
	return nil
}

// validateMargin checks a holder margin on its own ([ValidateWindow],
// [WithHolderMargin]).
func validateMargin(margin time.Duration) error {
	if margin < 0 {
		return fmt.Errorf("%w: negative holder margin %v", ErrInvalidTiming, margin)
	}
	return nil
}

// ValidateTiming checks that a holder with these settings can keep a lease:
// the window must be valid (see [ValidateWindow]) and the renew interval
// positive and at most half the window, so that a renewal and one retry fit
// before the deadline.
func ValidateTiming(d, margin, interval time.Duration, rho float64) error {
	if err := ValidateWindow(d, margin, rho); err != nil {
		return err
	}
	if err := validateInterval(interval); err != nil {
		return err
	}
	if w := HolderValidity(d, rho, margin); interval > w/2 {
		return fmt.Errorf("%w: renew interval %v exceeds half the holder's validity %v (duration %v, margin %v)",
			ErrInvalidTiming, interval, w, d, margin)
	}
	return nil
}

// validateInterval checks a renew interval on its own ([ValidateTiming],
// [WithRenewInterval]).
func validateInterval(interval time.Duration) error {
	if interval < MinRenewInterval {
		return fmt.Errorf("%w: renew interval %v: at least %v", ErrInvalidTiming, interval, MinRenewInterval)
	}
	return nil
}

// MinRenewInterval and MinAttemptTimeout are the least [WithRenewInterval]
// and [WithAttemptTimeout] take: below them every attempt ends before its
// answer can come, and the keeper (or Acquire) retried in a tight loop
// (130,000 failed renewals in 2.7 s at 1 ns; found by an outside client).
const (
	MinRenewInterval  = 10 * time.Millisecond
	MinAttemptTimeout = 10 * time.Millisecond
)

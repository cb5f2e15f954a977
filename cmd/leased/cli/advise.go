package cli

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/kvlease"
)

func newAdvise(stdout io.Writer) *cobra.Command {
	var m kvlease.Measurements
	var output string
	cmd := &cobra.Command{
		Use:   "advise --work-p99 D --rtt-p99 D --pause-p99 D [--clock-rate R]",
		Short: "Recommend a lease duration, margins and renewal interval from p99 measurements",
		Long: `advise turns measurements taken on the holder into a lease configuration and
says why for each figure (docs/safety.md). Measure p99 values: the work done
between two checks of the lease, a renewal's round trip (leased.renewal.duration),
a pause of the holder process (e.g. Go's /sched/pauses/total/gc:seconds from
runtime/metrics, kvlease.GCPauseP99),
and, if known, the clock-rate error against the grantor (client.Client's
Clock().Estimate; its sign does not matter: a slow clock is as far off as a
fast one).`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			if m.RenewRTT <= 0 {
				return usageError{fmt.Errorf("--rtt-p99 is required, a positive duration (got %v)", m.RenewRTT)}
			}
			// Not --clock-rate: Clock().Estimate's rate is negative for a
			// grantor clock slower than the holder's, an error as large as
			// a fast one's, and kvlease.Advise takes it as such (it was
			// refused as a negative measurement; found by an outside client).
			for flag, negative := range map[string]bool{"--work-p99": m.Work < 0, "--pause-p99": m.Pause < 0} {
				if negative { // it said only "measurements cannot be negative" (found by an outside client)
					return usageError{fmt.Errorf("%s: a measurement cannot be negative", flag)}
				}
			}
			if output != "text" && output != "json" {
				return usageError{fmt.Errorf("-o %q: want text or json", output)}
			}
			// Beyond any lease (whose durations are at most hours): the
			// arithmetic overflowed, and advice wrapped to 1 s (found by
			// an outside client).
			// The flag named is the one over its bound: a --work-p99 over
			// it was refused as "--rtt-p99 and --pause-p99 over 1h0m0s"
			// (found by an outside client).
			for _, f := range []struct {
				flag     string
				v, bound time.Duration
			}{{"--rtt-p99", m.RenewRTT, maxMeasured}, {"--pause-p99", m.Pause, maxMeasured}, {"--work-p99", m.Work, 1000 * maxMeasured}} {
				if f.v > f.bound {
					return usageError{fmt.Errorf("%s %v: over %v, no lease's to absorb", f.flag, f.v, f.bound)}
				}
			}
			if math.IsNaN(m.ClockRate) || math.IsInf(m.ClockRate, 0) {
				return usageError{fmt.Errorf("--clock-rate %v: want a number, such as 0.0001", m.ClockRate)}
			}
			// Advise takes ρ ten times the measured error, which must stay
			// under 0.1: a measurement of 2 was refused as "clock-rate bound
			// 20", a figure the user never gave (found by an outside client).
			if math.Abs(m.ClockRate) >= maxClockRate {
				return usageError{fmt.Errorf("--clock-rate %v: a clock-rate error of %g or more is no clock's to lease with (advice takes ρ ten times it, under 0.1); "+
					"it is a rate, such as 0.0001 for 100 µs a second, not a percentage", m.ClockRate, maxClockRate)}
			}
			a := kvlease.Advise(m)
			if err := a.Check(); err != nil {
				// Advice no lease takes is no advice.
				return fmt.Errorf("no lease can be kept safely with these measurements: %w", err)
			}
			if output == "json" {
				printer{w: stdout, json: true}.obj(map[string]any{
					"duration": a.Duration.String(), "renew_interval": a.RenewInterval.String(),
					"holder_margin": a.HolderMargin.String(), "grantor_margin": a.GrantorMargin.String(),
					"clock_rate": a.ClockRate, "failover": a.Failover.String(), "reasons": a.Reasons})
				return nil
			}
			_, err := io.WriteString(stdout, a.String())
			return err
		},
	}
	cmd.Flags().DurationVar(&m.Work, "work-p99", 0, "p99 of a unit of work between two checks")
	cmd.Flags().DurationVar(&m.RenewRTT, "rtt-p99", 0, "p99 of a renewal's round trip (required)")
	cmd.Flags().DurationVar(&m.Pause, "pause-p99", 10*time.Millisecond, "p99 of a pause of the holder process")
	cmd.Flags().Float64Var(&m.ClockRate, "clock-rate", 0, "measured clock-rate error against the grantor, either sign (0: unknown)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

// maxMeasured bounds a round trip or pause advise takes.
const maxMeasured = time.Hour

// maxClockRate bounds --clock-rate: ten times it is the largest ρ
// kvlease.ValidateTiming takes.
const maxClockRate = 0.01

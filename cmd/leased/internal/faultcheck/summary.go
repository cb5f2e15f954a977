package faultcheck

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Summary renders the report for people (a test log, README's
// reliability section): the figures, in a fixed order (each orphan of a
// caller that retried and each stale read on a line of its own), then
// each violation on a line of its own.
func (r *Report) Summary() string {
	f := &r.Figures
	var b strings.Builder
	fmt.Fprintf(&b, "tenures %d, renewals %d (%d refused, %d false losses), releases %d\n",
		f.Tenures, f.Renewals, f.RenewalsRefused, f.FalseLosses, f.Releases)
	fmt.Fprintf(&b, "orphan tenures %d (%d of callers that retried, %d of them stored after the retry's answer, %d answered when it may have lapsed; %d of callers that gave up), unknown tenures %d, stale reads %d\n",
		f.Orphans, f.RetriedOrphans, f.LateOrphans, f.LapsedOrphans, f.Orphans-f.RetriedOrphans, f.UnknownTenures, f.StaleReads)
	var faults []string
	for _, k := range slices.Sorted(maps.Keys(f.FaultsByKind)) {
		faults = append(faults, fmt.Sprintf("%s %d", k, f.FaultsByKind[k]))
	}
	fmt.Fprintf(&b, "faults: %s\n", cmp.Or(strings.Join(faults, ", "), "none"))
	var leases []string
	for _, l := range slices.Sorted(maps.Keys(f.AvailabilityByLease)) {
		leases = append(leases, fmt.Sprintf("%s %.2f%%", l, 100*f.AvailabilityByLease[l]))
	}
	fmt.Fprintf(&b, "availability %.2f%% (%s)\n", 100*f.Availability, strings.Join(leases, ", "))
	for _, k := range slices.Sorted(maps.Keys(f.AvailabilityAround)) {
		fmt.Fprintf(&b, "availability around %s %.2f%%\n", k, 100*f.AvailabilityAround[k])
	}
	for _, c := range []HandoverCause{AfterRelease, AfterCrash, AfterPause, AfterAbandon} {
		if d, ok := f.Handover[c]; ok {
			fmt.Fprintf(&b, "handover after %s: %d, min %v, median %v, max %v\n", c, d.N, d.Min, d.Median, d.Max)
		}
	}
	for _, o := range r.Orphans {
		if o.Retried() {
			fmt.Fprintf(&b, "  retried orphan: %s\n", o)
		}
	}
	for _, v := range r.StaleReads {
		fmt.Fprintf(&b, "  stale read: %s\n", v)
	}
	fmt.Fprintf(&b, "violations: %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	return b.String()
}

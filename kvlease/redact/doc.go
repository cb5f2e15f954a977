// Package redact prints values that carry a holder's secret with the
// secret replaced by [Mark]: the Format methods of kvlease's records and
// requests and of grantor/api's wire types call [Format], so that a value
// logged with any verb (%v, %+v, %#v, %s) never gives the holder's proof
// of ownership away.
package redact

// Package kvcas keeps a JSON document per key of a JetStream KV bucket and
// changes it by compare-and-set: the one read-decide-write loop that
// [github.com/leased/leased/kvlease/fence.KV] and the work queue's sink
// share; and [OpenBucket], how both open their buckets (creating a missing
// one, leaving an existing one as its owner configured it).
//
// It guarantees that each change was decided on the document it replaces:
// a writer that loses the compare-and-set reads again and decides again.
// It does not order writers, bound the retries (ctx does), or retry
// anything but a lost compare-and-set; what a document means (a token, a
// result) is its user's.
package kvcas

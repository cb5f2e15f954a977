// Package api is the wire protocol of the leased service: its subjects,
// the JSON bodies of its requests and replies, its error codes and the
// mapping between those codes and kvlease's errors. docs/api.md describes
// the same protocol for callers in any language.
//
// # What it guarantees
//
// The types here are the protocol: a field or code changes only with a new
// subject version (lease.v1, svc.v1). [ErrorBodyOf] and [ErrorBody.Err] are
// each other's inverse up to the sentinel: an error that crosses the wire
// and comes back still matches the same kvlease sentinel with [errors.Is]
// ([kvlease.ErrHeld], [kvlease.ErrNotHolder], [kvlease.ErrUnavailable], …),
// so Go callers test errors alike whether they talk to a [kvlease.Store] or
// to the service. [Decode] is the service's strict reading of a request:
// unknown fields and trailing data are errors.
//
// # What it does not do
//
// It holds no server and no client code, and imports nothing of leased but
// kvlease (for the records and sentinels it translates): it neither sends
// nor answers a request. The service is package
// [github.com/leased/leased/grantor], the Go client
// [github.com/leased/leased/grantor/client].
//
// # Service registration
//
// A registration is a lease named [RegistrationPrefix]+"<service>.<instance>"
// whose attributes carry the instance's address, gossip node and metadata:
// [Registration.Attributes] and [RegistrationOf] encode and decode them, so
// that instances, registries and non-Go callers agree on the layout.
package api

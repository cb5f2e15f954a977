// Package grantor will hold the server side of leased: the NATS service API
// (lease.v1.*), policy, and service registration (issues 3 and 5). Its
// subpackage [github.com/leased/leased/grantor/embedded] runs the embedded
// JetStream server that `leased serve` and the tests use.
package grantor

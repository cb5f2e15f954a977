package grantor

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/redact"
)

// Node is a running lease service, as it answers the NATS service
// discovery's INFO request.
type Node struct {
	Node    string // its node name
	ID      string // the service instance's id
	Bucket  string // the lease bucket it serves
	NATSURL string // the NATS URL it connected to as it started (redacted; micro's metadata stays as registered, so not the server of a later reconnect)
	Version string // the service API's version
	// Policy is the grantor margin and duration range it grants with, as
	// its INFO says it ("" from a service too old to say): the grantors
	// of a bucket should agree, or one request is granted by one node and
	// refused by another (found by an outside client, mid-way through a
	// rolling change of serve --max-ttl).
	Policy string
	Build  string // which build of leased it runs ([Build]; "" if it does not say)
}

// The service INFO's metadata keys.
const (
	metaBucket  = "bucket"
	metaNode    = "node"
	metaNATSURL = "nats_url"
	metaPolicy  = "policy"
	metaBuild   = "build"
)

// infoMetadata is the metadata the service's INFO answers with: "build"
// only if the build says (docs/api.md), not as "".
func (s *Service) infoMetadata() map[string]string {
	md := map[string]string{metaBucket: s.store.Bucket(), metaNode: s.node, metaNATSURL: redact.URL(s.nc.ConnectedUrl()),
		metaPolicy: policyOf(s.store)}
	if b := Build(); b != "" {
		md[metaBuild] = b
	}
	return md
}

// policyOf says a Store's grantor margin and duration range, as a service
// reports them: "grantor margin 1s, durations 1s to 1h0m0s".
func policyOf(st *kvlease.Store) string {
	minD, maxD := st.DurationRange()
	return fmt.Sprintf("grantor margin %v, durations %v to %v", st.GrantorMargin(), minD, maxD)
}

// Nodes asks every lease service that nc's account reaches for its info
// and returns the answers that arrive within wait, by node name.
func Nodes(nc *nats.Conn, wait time.Duration) ([]Node, error) {
	subj, err := micro.ControlSubject(micro.InfoVerb, api.ServiceName, "")
	if err != nil {
		return nil, err
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subj, inbox, nil); err != nil {
		return nil, err
	}
	var nodes []Node
	deadline := time.Now().Add(wait)
	for {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break // the wait is over
		}
		var info micro.Info
		if json.Unmarshal(msg.Data, &info) != nil {
			continue
		}
		nodes = append(nodes, Node{Node: info.Metadata[metaNode], ID: info.ID, Bucket: info.Metadata[metaBucket],
			NATSURL: info.Metadata[metaNATSURL], Version: info.Version, Policy: info.Metadata[metaPolicy],
			Build: info.Metadata[metaBuild]})
	}
	slices.SortFunc(nodes, func(a, b Node) int { return strings.Compare(a.Node, b.Node) })
	return nodes, nil
}

// ErrOtherBucket: another lease service that the connection's NATS
// account reaches serves another bucket. The services share their
// subjects and their queue group, so NATS would hand each request to one
// of them at random, and a lease could be granted twice at once, once in
// each bucket (found by an outside client: a second `serve --bucket
// other` on the same NATS server, or an example's own grantor). One NATS
// account serves one bucket; give another bucket an account of its own.
var ErrOtherBucket = errors.New("grantor: another lease service on this NATS account serves another bucket")

// otherBucketWait is how long Start listens for the other services' info.
const otherBucketWait = 100 * time.Millisecond

// checkBuckets refuses to serve beside a lease service of another bucket
// ([ErrOtherBucket]); self is this service's instance id, if started.
func (s *Service) checkBuckets(self string) error {
	return CheckBucket(s.nc, s.store.Bucket(), self)
}

// CheckBucket returns [ErrOtherBucket] if a lease service that nc's
// account reaches, other than the one whose instance id is self (""
// for none), serves a bucket other than bucket; it listens 100 ms for
// their answers. [Service.Start] checks it; a grantor program calls it
// before it opens (and so creates) its bucket (a refused `serve` left a
// bucket behind; found by an outside client).
func CheckBucket(nc *nats.Conn, bucket, self string) error {
	nodes, err := Nodes(nc, otherBucketWait)
	if err != nil {
		return fmt.Errorf("grantor: look for other lease services: %w", err)
	}
	for _, n := range nodes {
		if n.ID != self && n.Bucket != bucket {
			return fmt.Errorf("%w: node %q (service %s) serves bucket %q, this one %q: one NATS account serves one bucket",
				ErrOtherBucket, n.Node, n.ID, n.Bucket, bucket)
		}
	}
	return nil
}

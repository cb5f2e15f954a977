package follow

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A consumer on the stream's leader, or on a replica its leader reports
// current and not lagging, is kept; one on a replica behind (a node just
// restarted, still catching up) is made anew elsewhere: it delivered the
// state from before the node's death and not what it caught up on (found
// by an outside client). Without a leader's view nothing is refused.
func TestPlacedBehind(t *testing.T) {
	si := &jetstream.StreamInfo{Cluster: &jetstream.ClusterInfo{Leader: "n1", Replicas: []*jetstream.PeerInfo{
		{Name: "n2", Current: true},
		{Name: "n3", Current: true, Lag: 7},
		{Name: "n4", Current: false},
	}}}
	for _, tc := range []struct {
		node string
		si   *jetstream.StreamInfo
		want bool
	}{
		{"n1", si, false},
		{"n2", si, false},
		{"n3", si, true},
		{"n4", si, true},
		{"n5", si, false}, // not a replica the leader lists: nothing known
		{"n3", &jetstream.StreamInfo{Cluster: &jetstream.ClusterInfo{Replicas: si.Cluster.Replicas}}, false}, // no leader
		{"n3", &jetstream.StreamInfo{}, false}, // not replicated
		{"n3", nil, false},
	} {
		if got := placedBehind(tc.node, tc.si); got != tc.want {
			t.Errorf("placedBehind(%s, %+v) = %v, want %v", tc.node, tc.si, got, tc.want)
		}
	}
}

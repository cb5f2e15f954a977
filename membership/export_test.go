package membership

import "slices"

// PauseHeartbeats exposes the test hook to the external tests.
func PauseHeartbeats(n *Node, pause bool) { n.pauseHeartbeats(pause) }

// HeartbeatTargets exposes the names of the members n sends heartbeats to.
func HeartbeatTargets(n *Node) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var names []string
	for _, t := range n.r.targets() {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names
}

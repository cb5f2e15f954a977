package membership

// PauseHeartbeats exposes the test hook to the external tests.
func PauseHeartbeats(n *Node, pause bool) { n.pauseHeartbeats(pause) }

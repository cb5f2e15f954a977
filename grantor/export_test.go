package grantor

// SetObservedHook makes s's observer call f with the revision of each
// change of the bucket it has handled (reported, or skipped as its own).
// Call it before Start.
func SetObservedHook(s *Service, f func(rev uint64)) { s.onObserved = f }

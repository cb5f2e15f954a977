package grantor

import (
	"runtime/debug"
	"sync"
)

// modulePath is leased's module.
const modulePath = "github.com/leased/leased"

// Build says which build of leased this program runs, as a grantor's
// service reports it (its INFO's metadata "build", what `leased status`
// shows of each node): for leased's own commands, the commit it was built
// from (12 hex digits, "+dirty" if the tree had changes) or the module
// version it was installed at; for a program that uses leased as a
// library, the version of leased it requires. "" if the build does not
// say (a build without version control information). The service API's
// version ([api.ServiceVersion]) changes only with the API: every build
// said 0.1.0, and the nodes of a rolling upgrade could not be told apart
// (found by an outside client).
func Build() string {
	buildOnce.Do(func() { build = buildOf(debug.ReadBuildInfo()) })
	return build
}

var (
	buildOnce sync.Once
	build     string
)

func buildOf(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return ""
	}
	if bi.Main.Path != modulePath {
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				if d.Replace != nil {
					return d.Replace.Version // "" for a local directory
				}
				return d.Version
			}
		}
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		return rev[:min(12, len(rev))] + dirty
	}
	if v := bi.Main.Version; v != "(devel)" {
		return v
	}
	return ""
}

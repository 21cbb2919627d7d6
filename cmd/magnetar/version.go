package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func init() { subcommands = append(subcommands, newVersionCommand) }

// versionString describes this binary from runtime/debug.ReadBuildInfo: the
// module version, the VCS revision and time, whether the tree was dirty,
// and the Go version.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information)"
	}
	rev, at, dirty := "unknown", "unknown", "unknown"
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", bi.Main.Path, bi.Main.Version)
	fmt.Fprintf(&b, "revision: %s\ntime: %s\ndirty: %s\ngo: %s", rev, at, dirty, bi.GoVersion)
	return b.String()
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version, VCS revision and time, dirty flag and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return err
		},
	}
}

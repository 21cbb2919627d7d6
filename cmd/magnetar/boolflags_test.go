package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Boolean flags show as "--name" in every command's help, and still parse
// alone, with =true and with =false.
func TestBoolFlagsRenderPlain(t *testing.T) {
	root := newRootCommand()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if u := c.Flags().FlagUsages(); strings.Contains(u, "[=true|false]") {
			t.Errorf("%s --help shows [=true|false]:\n%s", c.CommandPath(), u)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)

	cmd, _, err := root.Find([]string{"runbook", "failover"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want bool
	}{{[]string{"--no-wait"}, true}, {[]string{"--no-wait=false"}, false}, {[]string{"--no-wait=true"}, true}} {
		if err := cmd.Flags().Set("no-wait", "false"); err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got, err := cmd.Flags().GetBool("no-wait"); err != nil || got != tc.want {
			t.Errorf("%v: --no-wait is %v (%v), want %v", tc.args, got, err, tc.want)
		}
	}
}

package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// plainBool is a boolean flag's value that help and the CLI reference show
// as "--name", not "--name[=true|false]" (how pflag renders a value that
// says it is a boolean flag). "--name" alone still sets it: the flag's
// NoOptDefVal stays "true", and "--name=false" still clears it.
type plainBool struct{ pflag.Value }

// IsBoolFlag reports false so that pflag's usage adds no "[=true|false]".
func (plainBool) IsBoolFlag() bool { return false }

// plainBoolFlags gives every boolean flag of root and the commands below it
// a plainBool value, after adding the commands and flags cobra would add
// itself at Execute (help, version, the help and completion commands), so
// they are covered too.
func plainBoolFlags(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.InitDefaultVersionFlag()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.InitDefaultHelpFlag()
		for _, fs := range []*pflag.FlagSet{c.PersistentFlags(), c.LocalNonPersistentFlags(), c.Flags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if _, done := f.Value.(plainBool); !done && f.Value.Type() == "bool" && f.NoOptDefVal == "true" {
					f.Value = plainBool{f.Value}
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

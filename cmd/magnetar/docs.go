package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

//go:generate go run . docs --dir ../../docs/cli

func init() { subcommands = append(subcommands, newDocsCommand) }

// cliDocsDir is where the checked-in CLI reference lives, relative to the
// repository root; TestCLIDocsUpToDate compares it with a fresh rendering.
const cliDocsDir = "docs/cli"

func newDocsCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "docs",
		Short:  "Write the CLI reference: one Markdown page per command and an index README.md",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeCLIDocs(cmd.Root(), dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", cliDocsDir, "directory the pages are written to; its old magnetar*.md pages and README.md are replaced")
	return cmd
}

// writeCLIDocs renders root and every visible command below it into dir, one
// page a command (magnetar_org_create.md for "magnetar org create"), and an
// index README.md listing them. Pages in dir left from commands that no longer
// exist are removed, so dir always matches the command tree.
func writeCLIDocs(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "magnetar*.md"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	// The completion command is added by Execute; add it here so the
	// reference shows what the binary runs.
	root.InitDefaultCompletionCmd()
	root.DisableAutoGenTag = true
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		return fmt.Errorf("docs: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(cliIndex(root)), 0o644)
}

// cliIndex is the index page: every visible command, indented under its
// parent, linked to its page, with its one-line description.
func cliIndex(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("# magnetar command reference\n\n")
	b.WriteString("Generated from the commands by `go run ./cmd/magnetar docs --dir docs/cli` (or `make generate`); do not edit.\n")
	b.WriteString("Every command also prints this with `--help`.\n\n")
	var walk func(c *cobra.Command, depth int)
	walk = func(c *cobra.Command, depth int) {
		page := strings.ReplaceAll(c.CommandPath(), " ", "_") + ".md"
		fmt.Fprintf(&b, "%s- [`%s`](%s): %s\n", strings.Repeat("  ", depth), c.CommandPath(), page, c.Short)
		children := c.Commands()
		sort.Slice(children, func(i, j int) bool { return children[i].Name() < children[j].Name() })
		for _, child := range children {
			if child.IsAvailableCommand() && !child.IsAdditionalHelpTopicCommand() {
				walk(child, depth+1)
			}
		}
	}
	walk(root, 0)
	return b.String()
}

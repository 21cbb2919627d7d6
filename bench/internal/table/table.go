package table

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Table is a header and rows of cells.
type Table struct {
	Header []string
	Rows   [][]string
}

// Add appends one row.
func (t *Table) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

// WriteText writes t as right-aligned columns.
func (t *Table) WriteText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(t.Header, "\t")+"\t")
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
}

// WriteMarkdown writes t as a Markdown table, the first column left-aligned
// and the others right-aligned.
func (t *Table) WriteMarkdown(w io.Writer) {
	fmt.Fprintln(w, "| "+strings.Join(t.Header, " | ")+" |")
	seps := make([]string, len(t.Header))
	for i := range seps {
		seps[i] = "---:"
	}
	if len(seps) > 0 {
		seps[0] = "---"
	}
	fmt.Fprintln(w, "| "+strings.Join(seps, " | ")+" |")
	for _, r := range t.Rows {
		fmt.Fprintln(w, "| "+strings.Join(r, " | ")+" |")
	}
}

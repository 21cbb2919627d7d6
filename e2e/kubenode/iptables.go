package kubenode

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
)

// iptablesTools returns the families whose rules kubelet may change:
// iptables, and ip6tables where it is installed.
func iptablesTools() []string {
	tools := []string{"iptables"}
	if _, err := exec.LookPath("ip6tables-save"); err == nil {
		tools = append(tools, "ip6tables")
	}
	return tools
}

// ruleset is one table of iptables-save's output.
type ruleset struct {
	chains []string
	rules  []string // "-A CHAIN ..." lines
}

// parseSave reads iptables-save output into tables.
func parseSave(out []byte) map[string]*ruleset {
	tables := map[string]*ruleset{}
	var cur *ruleset
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "*"):
			cur = &ruleset{}
			tables[line[1:]] = cur
		case cur == nil:
		case strings.HasPrefix(line, ":"):
			if f := strings.Fields(line[1:]); len(f) > 0 {
				cur.chains = append(cur.chains, f[0])
			}
		case strings.HasPrefix(line, "-A "):
			cur.rules = append(cur.rules, line)
		case line == "COMMIT":
			cur = nil
		}
	}
	return tables
}

// listChains returns each table's chains as tool-save prints them.
func listChains(tool string) (map[string][]string, error) {
	out, err := exec.Command(tool + "-save").Output()
	if err != nil {
		return nil, fmt.Errorf("kubenode: %s-save: %w", tool, err)
	}
	res := map[string][]string{}
	for t, rs := range parseSave(out) {
		res[t] = rs.chains
	}
	return res, nil
}

// removeNewChains deletes the chains that are not in before (table ->
// chains), with the rules of other chains that jump to them. A table
// absent from before had no chains of ours to keep: its new chains go too,
// its built-in chains stay (they cannot be deleted, and their rules that
// reach new chains are deleted).
func removeNewChains(tool string, before map[string][]string, log *slog.Logger) error {
	out, err := exec.Command(tool + "-save").Output()
	if err != nil {
		return fmt.Errorf("kubenode: %s-save: %w", tool, err)
	}
	script := restoreScript(parseSave(out), before)
	if script == "" {
		return nil
	}
	log.Info("kubenode: removing iptables chains", "tool", tool, "script", script)
	cmd := exec.Command(tool+"-restore", "--noflush")
	cmd.Stdin = strings.NewReader(script)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubenode: %s-restore: %v: %s\ninput:\n%s", tool, err, bytes.TrimSpace(b), script)
	}
	return dropNewTables(tool, before, log)
}

// dropNewTables deletes the tables that did not exist before and are now
// empty again (built-in chains without rules). With iptables' nf_tables
// back end a table exists only once something used it, and iptables has
// no command to delete one: nft does. Without nft, or with the legacy back
// end (whose tables always exist), nothing is done.
func dropNewTables(tool string, before map[string][]string, log *slog.Logger) error {
	nft, err := exec.LookPath("nft")
	if err != nil {
		return nil
	}
	ver, err := exec.Command(tool, "--version").Output()
	if err != nil || !bytes.Contains(ver, []byte("nf_tables")) {
		return nil
	}
	out, err := exec.Command(tool + "-save").Output()
	if err != nil {
		return fmt.Errorf("kubenode: %s-save: %w", tool, err)
	}
	family := "ip"
	if tool == "ip6tables" {
		family = "ip6"
	}
	for t, rs := range parseSave(out) {
		if _, ok := before[t]; ok || len(rs.rules) > 0 {
			continue
		}
		if b, err := exec.Command(nft, "delete", "table", family, t).CombinedOutput(); err != nil {
			return fmt.Errorf("kubenode: nft delete table %s %s: %v: %s", family, t, err, bytes.TrimSpace(b))
		}
		log.Info("kubenode: nf_tables table deleted", "family", family, "table", t)
	}
	return nil
}

// builtinChains cannot be deleted; in a table that did not exist before,
// they are only emptied of rules that jump to new chains.
var builtinChains = []string{"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}

// restoreScript is the iptables-restore --noflush input that deletes the
// chains of now that are not in before, and every rule jumping to them.
func restoreScript(now map[string]*ruleset, before map[string][]string) string {
	tables := make([]string, 0, len(now))
	for t := range now {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	var b strings.Builder
	for _, t := range tables {
		rs := now[t]
		var added []string
		for _, c := range rs.chains {
			if !slices.Contains(before[t], c) && !slices.Contains(builtinChains, c) {
				added = append(added, c)
			}
		}
		if len(added) == 0 {
			continue
		}
		fmt.Fprintf(&b, "*%s\n", t)
		for _, r := range rs.rules {
			f := strings.Fields(r)
			if len(f) < 2 || slices.Contains(added, f[1]) {
				continue // flushed with its chain
			}
			for i := 2; i+1 < len(f); i++ {
				if (f[i] == "-j" || f[i] == "-g") && slices.Contains(added, f[i+1]) {
					fmt.Fprintf(&b, "-D %s\n", r[len("-A "):])
					break
				}
			}
		}
		for _, c := range added {
			fmt.Fprintf(&b, "-F %s\n", c)
		}
		for _, c := range added {
			fmt.Fprintf(&b, "-X %s\n", c)
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

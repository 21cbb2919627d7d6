// Command idle measures an idle `magnetar standalone`: time until the health
// endpoint answers (fresh data directory and restart on existing data) and
// resident memory after it settles. It builds the binary itself and prints a
// Markdown table.
//
//	go run ./bench/idle [-runs 3] [-settle 5s]
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/magnetar-dev/magnetar/internal/freeport"
	"github.com/magnetar-dev/magnetar/internal/procstatus"
)

func main() {
	runs := flag.Int("runs", 3, "measurements of each kind")
	settle := flag.Duration("settle", 5*time.Second, "idle time before reading resident memory")
	flag.Parse()
	tmp, err := os.MkdirTemp("", "magnetar-idle")
	check(err)
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "magnetar")
	out, err := exec.Command("go", "build", "-o", bin, "./cmd/magnetar").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	var fresh, restart []float64
	rss := make([][]float64, len(rssFields))
	for i := 0; i < *runs; i++ {
		dir := filepath.Join(tmp, fmt.Sprintf("data-%d", i))
		ports := []string{freeAddr(), freeAddr(), freeAddr()}
		d, kb := run(bin, dir, ports, *settle)
		fresh = append(fresh, d.Seconds()*1000)
		for j := range rssFields {
			rss[j] = append(rss[j], kb[j]/1024)
		}
		d, _ = run(bin, dir, ports, 0)
		restart = append(restart, d.Seconds()*1000)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("Idle `magnetar standalone` (%d runs, median [min-max]; load average at end: %s)\n\n", *runs, strings.TrimSpace(string(load)))
	fmt.Println("| measure | value |")
	fmt.Println("|---|---|")
	fmt.Printf("| ready on a fresh data dir (ms) | %s |\n", summary(fresh))
	fmt.Printf("| ready on existing data, restart (ms) | %s |\n", summary(restart))
	for j, f := range rssFields {
		fmt.Printf("| %s after %v idle (MiB) | %s |\n", f, *settle, summary(rss[j]))
	}
}

// rssFields are the lines of /proc/PID/status reported: all resident
// memory, then its anonymous (heap, stacks) and file-backed (the
// executable's pages) parts.
var rssFields = []string{"VmRSS", "RssAnon", "RssFile"}

// run starts the standalone, waits for health, optionally idles and reads
// rssFields (KiB), then stops it with SIGTERM.
func run(bin, dir string, ports []string, settle time.Duration) (time.Duration, []float64) {
	cmd := exec.Command(bin, "standalone", "--data-dir", dir, "--broker-addr", ports[0], "--http-addr", ports[1], "--bookie-addr", ports[2])
	start := time.Now()
	check(cmd.Start())
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	for {
		resp, err := http.Get("http://" + ports[1] + "/admin/v2/brokers/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(start) > time.Minute {
			fmt.Fprintln(os.Stderr, "standalone not ready after a minute")
			os.Exit(1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	ready := time.Since(start)
	if settle == 0 {
		return ready, nil
	}
	time.Sleep(settle)
	return ready, residentKiB(cmd.Process.Pid)
}

func residentKiB(pid int) []float64 {
	b, err := procstatus.Bytes(pid, rssFields...)
	check(err)
	out := make([]float64, len(b))
	for i, v := range b {
		out[i] = float64(v) / 1024
	}
	return out
}

func summary(v []float64) string {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return fmt.Sprintf("%.0f [%.0f-%.0f]", s[len(s)/2], s[0], s[len(s)-1])
}

func freeAddr() string {
	a, err := freeport.Addr()
	check(err)
	return a
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

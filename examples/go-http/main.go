// Command go-http is a small HTTP service instrumented with spanwatch's span
// SDK: every request is a span named after its route, ended with an error
// status when the handler answers 5xx. spanwatch watches it from outside
// the process; the service itself only calls emit.Start and End.
//
//	go run ./examples/go-http -listen 127.0.0.1:8080
//	sudo spanwatch run --config examples/go-http/rules.yaml --output -
//	go run ./examples/go-http -load 30s -target http://127.0.0.1:8080
//
// Routes: /checkout (usually 2-6 ms; it calls chargeCard, a span of its
// own, "payment.charge", which 1 time in 50 spins on the CPU for 300 ms:
// over its 100 ms budget and checkout's 250 ms, so spanwatch samples it
// while it runs and captures both stacks), /report (a span
// "report.build" that 1 time in 10 waits 300 ms for its data: time off the
// CPU, in time.Sleep), /export (a span "export" that waits for a lock a
// stuck job holds: it never ends, and spanwatch reports it while it runs)
// and /search (1-2 ms, 1 in 20 fails with 503).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spanwatch/spanwatch/emit"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "serve on `ADDR`")
	load := flag.Duration("load", 0, "instead of serving, send requests to -target for this `DURATION`")
	target := flag.String("target", "http://127.0.0.1:8080", "the service -load sends requests to")
	rate := flag.Int("rate", 200, "requests per second -load sends")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *load > 0 {
		ctx, cancel := context.WithTimeout(ctx, *load)
		defer cancel()
		n, failed := generateLoad(ctx, *target, *rate)
		fmt.Printf("sent %d requests, %d answered 5xx\n", n, failed)
		return
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("serving on http://%s (span SDK mode: %s)", ln.Addr(), emit.Mode())
	if err := serve(ctx, ln); err != nil {
		log.Fatal(err)
	}
}

// newMux returns the service's routes, each wrapped in a span.
func newMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/checkout", spanned("checkout", http.HandlerFunc(checkout)))
	mux.Handle("/search", spanned("search", http.HandlerFunc(search)))
	mux.Handle("/report", spanned("report.build", http.HandlerFunc(report)))
	mux.Handle("/export", spanned("export", http.HandlerFunc(export)))
	return mux
}

func serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: newMux(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// spanned records each request to h as a span called name. Name spans by
// route, not by URL: every distinct name is a series.
func spanned(name string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sp := emit.Start(name)
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		var err error
		if sw.status >= 500 {
			err = fmt.Errorf("%s: status %d", name, sw.status)
		}
		sp.End(err)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

var charges atomic.Uint64

func checkout(w http.ResponseWriter, r *http.Request) {
	time.Sleep(time.Millisecond + rand.N(2*time.Millisecond))
	if err := chargeCard(); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	fmt.Fprintln(w, "ok")
}

// chargeCard is a span of its own, inside checkout's: spanwatch captures a
// slow span's stack when the span ends, so a span ended in the function
// that does the work names that function in the stack.
//
//go:noinline
func chargeCard() error {
	sp := emit.Start("payment.charge")
	// Every 50th charge takes the slow path, deterministically, so a demo
	// shows overruns at a known rate.
	if charges.Add(1)%50 == 0 {
		deadline := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(deadline) { // on CPU: a slow computation
		}
	} else {
		time.Sleep(time.Millisecond + rand.N(2*time.Millisecond))
	}
	sp.End(nil)
	return nil
}

var reports atomic.Uint64

func report(w http.ResponseWriter, r *http.Request) {
	rows := fetchReportData(reports.Add(1)%10 == 0)
	fmt.Fprintf(w, "%d rows\n", rows)
}

// fetchReportData waits for a slow backend 1 time in 10: 300 ms off the
// CPU, which spanwatch's samples show at the time.Sleep here.
//
//go:noinline
func fetchReportData(slow bool) int {
	if slow {
		time.Sleep(300 * time.Millisecond)
	} else {
		time.Sleep(time.Millisecond)
	}
	return 42
}

// exportLock is held by a job that never finishes (the bug this route
// demonstrates): every export waits for it forever.
var exportLock sync.Mutex

func init() {
	exportLock.Lock() // the stuck job
}

func export(w http.ResponseWriter, r *http.Request) {
	writeExport(w)
}

// writeExport waits for the export lock: its span never ends, and
// spanwatch reports it as still running, with this stack.
//
//go:noinline
func writeExport(w http.ResponseWriter) {
	exportLock.Lock()
	defer exportLock.Unlock()
	fmt.Fprintln(w, "exported")
}

var searches atomic.Uint64

func search(w http.ResponseWriter, r *http.Request) {
	time.Sleep(time.Millisecond + rand.N(time.Millisecond))
	if searches.Add(1)%20 == 0 {
		http.Error(w, "index unavailable", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "3 results")
}

// generateLoad sends requests, 8 of 10 to /search, 1 to /checkout, 1 to
// /report, at rate per second until ctx ends, and one to /export, which
// never answers.
func generateLoad(ctx context.Context, target string, rate int) (sent, failed int) {
	client := &http.Client{Timeout: 5 * time.Second}
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", target+"/export", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return sent, failed
		case <-tick.C:
		}
		path := "/search"
		switch i % 10 {
		case 0:
			path = "/checkout"
		case 5:
			path = "/report"
		}
		resp, err := client.Get(target + path)
		sent++
		if err != nil || resp.StatusCode >= 500 {
			failed++
		}
		if err == nil {
			resp.Body.Close()
		}
	}
}

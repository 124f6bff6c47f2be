// Command caller sends scheduler-extender calls the way kube-scheduler's HTTPExtender does,
// one after the other, and reports what each call cost the caller: for bench/call_floor.py.
//
// Like kube-scheduler (pkg/scheduler/extender.go, v1.34): one kept-alive TLS connection of a
// net/http Transport, the ExtenderArgs marshalled with encoding/json and POSTed, the answer
// decoded from the body with a json.Decoder into an ExtenderFilterResult, then the failed
// nodes turned into one status each (what kube-scheduler keeps for a FitError). The Pod is
// sent as the raw JSON kube-scheduler would marshal from its cache; its cost is the same
// whichever server answers.
//
//	caller -url https://127.0.0.1:9443/filter-best-fit -ca ca.crt -bodies calls.jsonl -rounds 3
//
// With -hold it prints {"warm": N} after the warm-up and waits for a line on stdin (so the
// runner can read the server's CPU from there). It then prints one JSON object: calls, the caller's CPU per call (user + system, from
// getrusage), the round trip's mean, p50 and p99, and the answer's mean size.
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sort"
	"syscall"
	"time"
)

// extenderArgs is k8s.io/kube-scheduler/extender/v1.ExtenderArgs (no JSON tags there
// either) with the Pod kept raw.
type extenderArgs struct {
	Pod       json.RawMessage
	Nodes     *json.RawMessage
	NodeNames *[]string
}

// filterResult is k8s.io/kube-scheduler/extender/v1.ExtenderFilterResult (Nodes is a
// *v1.NodeList there; a nodeCacheCapable extender answers null).
type filterResult struct {
	Nodes                      *json.RawMessage
	NodeNames                  *[]string
	FailedNodes                map[string]string
	FailedAndUnresolvableNodes map[string]string
	Error                      string
}

// status stands for the framework.Status kube-scheduler keeps per failed node.
type status struct {
	code    int
	reasons []string
}

type call struct {
	pod   json.RawMessage
	names []string
}

func loadCalls(path string) ([]call, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var calls []call
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	for scanner.Scan() {
		var args extenderArgs
		if err := json.Unmarshal(scanner.Bytes(), &args); err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		if args.NodeNames == nil {
			return nil, fmt.Errorf("%s: a call without NodeNames", path)
		}
		calls = append(calls, call{pod: append(json.RawMessage(nil), args.Pod...), names: *args.NodeNames})
	}
	return calls, scanner.Err()
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		log.Fatal(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

// send is HTTPExtender.send: marshal, POST, decode the body.
func send(client *http.Client, url string, args *extenderArgs, result *filterResult) (int, error) {
	out, err := json.Marshal(args)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(out))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("failed %v with extender at URL %v, code %v", args, url, resp.StatusCode)
	}
	counted := &countingReader{reader: resp.Body}
	return counted.n, json.NewDecoder(counted).Decode(result)
}

type countingReader struct {
	reader io.Reader
	n      int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.reader.Read(p)
	c.n += n
	return n, err
}

// filter is HTTPExtender.Filter and what findNodesThatPassExtenders does with its answer.
func filter(client *http.Client, url string, c call) (int, error) {
	names := c.names
	args := extenderArgs{Pod: c.pod, NodeNames: &names}
	var result filterResult
	size, err := send(client, url, &args, &result)
	if err != nil {
		return size, err
	}
	if result.Error != "" {
		return size, fmt.Errorf("extender error: %s", result.Error)
	}
	statuses := make(map[string]*status, len(names))
	for name, message := range result.FailedAndUnresolvableNodes {
		statuses[name] = &status{code: 3, reasons: []string{message}}
	}
	for name, message := range result.FailedNodes {
		if _, found := result.FailedAndUnresolvableNodes[name]; found {
			continue
		}
		statuses[name] = &status{code: 2, reasons: []string{message}}
	}
	byName := make(map[string]struct{}, len(names))
	for _, name := range names {
		byName[name] = struct{}{}
	}
	if result.NodeNames != nil {
		for _, name := range *result.NodeNames {
			if _, found := byName[name]; !found {
				return size, fmt.Errorf("extender answered node %q it was not sent", name)
			}
		}
	}
	return size, nil
}

func main() {
	url := flag.String("url", "", "the verb's URL, e.g. https://127.0.0.1:9443/filter-best-fit")
	ca := flag.String("ca", "", "CA certificate (PEM) the server's certificate chains to")
	path := flag.String("bodies", "", "ExtenderArgs, one JSON object a line")
	rounds := flag.Int("rounds", 1, "times to send every body (at least 1)")
	warm := flag.Int("warm", 50, "calls sent first and not counted")
	hold := flag.Bool("hold", false, "after the warm-up, print {\"warm\": N} and wait for a line on stdin")
	flag.Parse()
	calls, err := loadCalls(*path)
	if *rounds < 1 {
		log.Fatalf("-rounds %d: send every body at least once", *rounds)
	}
	if err != nil || len(calls) == 0 {
		log.Fatalf("no calls in %s: %v", *path, err)
	}
	pem, err := os.ReadFile(*ca)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		log.Fatalf("%s: no certificate", *ca)
	}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool},
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25, // utilnet.SetTransportDefaults
		IdleConnTimeout:     90 * time.Second,
	}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	for i := 0; i < *warm; i++ {
		if _, err := filter(client, *url, calls[i%len(calls)]); err != nil {
			log.Fatal(err)
		}
	}
	if *hold {
		// Tell the runner the warm-up is done, and wait until it has read the server's CPU.
		fmt.Printf("{\"warm\": %d}\n", *warm)
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			log.Fatalf("waiting for the go-ahead on stdin: %v", err)
		}
	}
	times := make([]float64, 0, *rounds*len(calls))
	answered := 0
	began := cpuSeconds()
	for r := 0; r < *rounds; r++ {
		for _, c := range calls {
			started := time.Now()
			size, err := filter(client, *url, c)
			if err != nil {
				log.Fatal(err)
			}
			times = append(times, time.Since(started).Seconds())
			answered += size
		}
	}
	spent := cpuSeconds() - began
	total := 0.0
	for _, t := range times {
		total += t
	}
	sort.Float64s(times)
	n := len(times)
	out, _ := json.Marshal(map[string]float64{
		"calls":                  float64(n),
		"caller_cpu_ms_per_call": 1000 * spent / float64(n),
		"mean_ms":                1000 * total / float64(n),
		"p50_ms":                 1000 * times[n/2],
		"p99_ms":                 1000 * times[(99*(n-1))/100],
		"answer_bytes_mean":      float64(answered) / float64(n),
	})
	fmt.Println(string(out))
}

// Command floor is a null scheduler extender: the extender protocol's floor for bench.cluster.
//
// It serves kube-scheduler's extender calls over HTTPS as a real extender must (HTTP/1.1,
// kept-alive TLS connections, the ExtenderArgs JSON read whole), but decides nothing: a
// filter answers the first node name it was sent (and fails none), a prioritize scores every
// name 0. The
// throughput kube-scheduler reaches through it is the most any extender could reach on the
// same machine and cluster; it places pods with no regard to MIG geometry, so its binds are
// for timing only.
//
//	go run ./bench/floor -listen 127.0.0.1:9443 -cert tls.crt -key tls.key
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
)

type extenderArgs struct {
	Pod       json.RawMessage `json:"Pod"`
	NodeNames *[]string       `json:"NodeNames"`
}

type filterResult struct {
	NodeNames                  []string          `json:"NodeNames"`
	FailedNodes                map[string]string `json:"FailedNodes"`
	FailedAndUnresolvableNodes map[string]string `json:"FailedAndUnresolvableNodes"`
	Error                      string            `json:"Error"`
}

type hostPriority struct {
	Host  string `json:"Host"`
	Score int64  `json:"Score"`
}

func read(w http.ResponseWriter, r *http.Request) ([]string, bool) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return nil, false
	}
	var args extenderArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		http.Error(w, "ExtenderArgs: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	if args.NodeNames == nil {
		http.Error(w, "NodeNames missing: set nodeCacheCapable: true", http.StatusBadRequest)
		return nil, false
	}
	return *args.NodeNames, true
}

func answer(w http.ResponseWriter, value any) {
	body, err := json.Marshal(value)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func filter(w http.ResponseWriter, r *http.Request) {
	names, ok := read(w, r)
	if !ok {
		return
	}
	// As migslice's best-fit filter answers: the chosen names only, the others dropped
	// (not failed), so kube-scheduler skips scoring when one is left.
	result := filterResult{NodeNames: names[:min(1, len(names))]}
	answer(w, result)
}

func prioritize(w http.ResponseWriter, r *http.Request) {
	names, ok := read(w, r)
	if !ok {
		return
	}
	scores := make([]hostPriority, 0, len(names))
	for _, name := range names {
		scores = append(scores, hostPriority{Host: name})
	}
	answer(w, scores)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	cert := flag.String("cert", "", "TLS certificate (PEM)")
	key := flag.String("key", "", "TLS key (PEM)")
	flag.Parse()
	mux := http.NewServeMux()
	for _, verb := range []string{"/filter", "/filter-best-fit"} {
		mux.HandleFunc(verb, filter)
	}
	mux.HandleFunc("/prioritize", prioritize)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	log.Printf("null extender on https://%s", *listen)
	log.Fatal(http.ListenAndServeTLS(*listen, *cert, *key, mux))
}

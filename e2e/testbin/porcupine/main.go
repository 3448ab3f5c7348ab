// Command linearizability-check reads a key-value history as JSON on stdin and checks it
// with porcupine, one register per key.
//
// Input: {"operations": [{"client": 0, "op": "put"|"get", "key": "k", "value": "v"|null,
// "call": ns, "return": ns|null}, ...]}. A put's value is what it wrote, a get's what it
// read (null: the key was absent). A put whose outcome is unknown has "return": null: it may
// have taken effect at any time after its call, so it returns at the end of time.
//
// Exit status: 0 linearizable, 1 not linearizable (the report names the key and the
// operations that could not be placed), 2 the check ran out of time, 3 bad input.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

type operation struct {
	Client int     `json:"client"`
	Kind   string  `json:"op"`
	Key    string  `json:"key"`
	Value  *string `json:"value"`
	Call   int64   `json:"call"`
	Return *int64  `json:"return"`
}

type history struct {
	Operations []operation `json:"operations"`
}

// register is the state of one key; it is also what a get returned.
type register struct {
	present bool
	value   string
}

type request struct {
	put     bool
	written register
}

var model = porcupine.Model{
	Init: func() interface{} { return register{} },
	Step: func(state, in, out interface{}) (bool, interface{}) {
		current, req := state.(register), in.(request)
		if req.put {
			return true, req.written
		}
		return out.(register) == current, current
	},
	DescribeOperation: func(in, out interface{}) string {
		req := in.(request)
		if req.put {
			return fmt.Sprintf("put %q", req.written.value)
		}
		return "get -> " + describe(out.(register))
	},
	DescribeState: func(state interface{}) string { return describe(state.(register)) },
}

func describe(r register) string {
	if !r.present {
		return "(absent)"
	}
	return fmt.Sprintf("%q", r.value)
}

func valueOf(v *string) register {
	if v == nil {
		return register{}
	}
	return register{present: true, value: *v}
}

func validate(ops []operation) error {
	for i, op := range ops {
		switch {
		case op.Kind != "put" && op.Kind != "get":
			return fmt.Errorf("operation %d: op must be put or get, not %q", i, op.Kind)
		case op.Kind == "put" && op.Value == nil:
			return fmt.Errorf("operation %d: a put needs a value", i)
		case op.Kind == "get" && op.Return == nil:
			return fmt.Errorf("operation %d: a get without a return did not happen; leave it out", i)
		case op.Return != nil && *op.Return < op.Call:
			return fmt.Errorf("operation %d: returns before its call", i)
		}
	}
	return nil
}

// byKey splits the history into one per key. An unknown put whose value no get returned is
// left out: it can always be placed last, after everything else, so it changes nothing.
func byKey(ops []operation) (keys []string, partitions map[string][]operation, unknown, unobserved int) {
	read := map[string]map[string]bool{}
	for _, op := range ops {
		if op.Kind == "get" && op.Value != nil {
			if read[op.Key] == nil {
				read[op.Key] = map[string]bool{}
			}
			read[op.Key][*op.Value] = true
		}
	}
	partitions = map[string][]operation{}
	for _, op := range ops {
		if op.Return == nil {
			unknown++
			if !read[op.Key][*op.Value] {
				unobserved++
				continue
			}
		}
		if _, seen := partitions[op.Key]; !seen {
			keys = append(keys, op.Key)
		}
		partitions[op.Key] = append(partitions[op.Key], op)
	}
	sort.Strings(keys)
	return keys, partitions, unknown, unobserved
}

func toPorcupine(ops []operation) []porcupine.Operation {
	out := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		ret := int64(math.MaxInt64)
		if op.Return != nil {
			ret = *op.Return
		}
		req := request{put: op.Kind == "put"}
		var result interface{} = register{}
		if req.put {
			req.written = valueOf(op.Value)
		} else {
			result = valueOf(op.Value)
		}
		out[i] = porcupine.Operation{ClientId: op.Client, Input: req, Call: op.Call, Output: result, Return: ret}
	}
	return out
}

func line(op operation) string {
	ret := "unknown"
	if op.Return != nil {
		ret = fmt.Sprintf("%.3fs", float64(*op.Return)/1e9)
	}
	what := "put " + describe(valueOf(op.Value))
	if op.Kind == "get" {
		what = "get -> " + describe(valueOf(op.Value))
	}
	return fmt.Sprintf("client %d %s [call %.3fs, return %s]", op.Client, what, float64(op.Call)/1e9, ret)
}

// explain prints the longest order porcupine could build and the operations left over.
func explain(out io.Writer, key string, ops []operation, info porcupine.LinearizationInfo) {
	var longest []int
	for _, partial := range info.PartialLinearizations()[0] {
		if len(partial) > len(longest) {
			longest = partial
		}
	}
	fmt.Fprintf(out, "key %q: NOT linearizable; at most %d of its %d operations fit one order\n",
		key, len(longest), len(ops))
	placed := map[int]bool{}
	state := register{}
	for _, id := range longest {
		placed[id] = true
		if ops[id].Kind == "put" {
			state = valueOf(ops[id].Value)
		}
	}
	from := len(longest) - 3
	if from < 0 {
		from = 0
	}
	fmt.Fprintln(out, "  the last operations of that order:")
	for _, id := range longest[from:] {
		fmt.Fprintln(out, "    "+line(ops[id]))
	}
	fmt.Fprintf(out, "  the key then holds %s; operations that fit nowhere after it, earliest call first:\n",
		describe(state))
	var left []int
	for id := range ops {
		if !placed[id] {
			left = append(left, id)
		}
	}
	sort.Slice(left, func(a, b int) bool { return ops[left[a]].Call < ops[left[b]].Call })
	for i, id := range left {
		if i == 5 {
			fmt.Fprintf(out, "    ... and %d more\n", len(left)-5)
			break
		}
		fmt.Fprintln(out, "    "+line(ops[id]))
	}
}

func main() {
	timeout := flag.Duration("timeout", 5*time.Minute, "give up on a key after this long (exit status 2)")
	visualize := flag.String("visualize", "", "write porcupine's HTML view of each failing key to PREFIX-<n>.html")
	flag.Parse()

	var h history
	decoder := json.NewDecoder(os.Stdin)
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&h); err != nil {
		fmt.Fprintln(os.Stderr, "bad history:", err)
		os.Exit(3)
	}
	if err := validate(h.Operations); err != nil {
		fmt.Fprintln(os.Stderr, "bad history:", err)
		os.Exit(3)
	}
	keys, partitions, unknown, unobserved := byKey(h.Operations)
	fmt.Printf("%d operations on %d keys; %d puts of unknown outcome, %d of them never read (placed last)\n",
		len(h.Operations), len(keys), unknown, unobserved)
	status := 0
	for n, key := range keys {
		ops := partitions[key]
		result, info := porcupine.CheckOperationsVerbose(model, toPorcupine(ops), *timeout)
		switch result {
		case porcupine.Ok:
			fmt.Printf("key %q: linearizable (%d operations)\n", key, len(ops))
		case porcupine.Unknown:
			fmt.Printf("key %q: no verdict within %s (%d operations)\n", key, *timeout, len(ops))
			if status == 0 {
				status = 2
			}
		default:
			explain(os.Stdout, key, ops, info)
			status = 1
			if *visualize != "" {
				path := fmt.Sprintf("%s-%d.html", *visualize, n)
				if err := porcupine.VisualizePath(model, info, path); err == nil {
					fmt.Printf("  view: %s\n", path)
				}
			}
		}
	}
	os.Exit(status)
}

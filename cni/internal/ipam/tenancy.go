package ipam

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/ipscheduler/ipscheduler/cni/internal/kube"
)

// The scheduler's tenancy rules (operator/ipscheduler/underlayip/selection.py,
// its Filter): a pod may use a NodeIPPool only when
//
//  1. the pool's spec.namespaces (absent: any namespace) holds the pod's namespace;
//  2. the pod's ipscheduler.io/pools, when it has one, names the pool (a
//     malformed one refuses every pool);
//  3. else its namespace's ipscheduler.io/default-pools, when it has one,
//     names the pool (the same form).
//
// Rules 2 and 3 choose the pool of the pod's first interface; a further
// interface's pool (ipscheduler.io/interfaces) is subject to rule 1 only
// (checkPoolNamespaces).
//
// The details of an ErrTenancy error say which rule refused in the
// scheduler's words: a malformed list reads exactly as pool_choice's
// problem (the pod's unschedulable reason), Python repr quoting included.

// poolNameRE is a DNS subdomain, as selection.py's _NAME (at most 253
// characters, checked apart).
var poolNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// poolList is a parsed ipscheduler.io/pools or ipscheduler.io/default-pools.
type poolList struct {
	names []string
	// problem says why the list is malformed ("" when it is not), as the
	// scheduler says it.
	problem string
}

// parsePoolList parses raw, the value of an annotation described by source
// in messages ("annotation ipscheduler.io/pools" or "namespace <ns>
// annotation ipscheduler.io/default-pools"): entries trimmed, an empty entry
// or one that is not a DNS subdomain makes it malformed.
func parsePoolList(raw, source string) poolList {
	var names []string
	for _, entry := range strings.Split(raw, ",") {
		name := strings.TrimFunc(entry, pyIsSpace)
		if name == "" || len(name) > 253 || !poolNameRE.MatchString(name) {
			return poolList{problem: fmt.Sprintf("%s=%s: %s is not a NodeIPPool name (a comma-separated list of pool names)",
				source, pyRepr(raw), pyRepr(name))}
		}
		names = append(names, name)
	}
	return poolList{names: names}
}

// checkTenancy applies the tenancy rules to the pod (namespace ns, live
// annotations podAnn) and the pool it is annotated with. The namespace is
// read only when the pod has no ipscheduler.io/pools. Errors are
// *types.Error: ErrTenancy, or 11/ErrAPI when the namespace cannot be read
// (404 is no default; 403 is ErrAPI naming the missing permission).
func checkTenancy(ctx context.Context, api API, ns string, podAnn map[string]string, pool *kube.NodeIPPool, poolName string) error {
	if err := checkPoolNamespaces(ns, pool, poolName); err != nil {
		return err
	}

	if raw, ok := podAnn[AnnotationPools]; ok {
		list := parsePoolList(raw, "annotation "+AnnotationPools)
		if list.problem != "" {
			return newErr(ErrTenancy, MsgTenancy, "%s", list.problem)
		}
		if !slices.Contains(list.names, poolName) {
			return newErr(ErrTenancy, MsgTenancy, "annotation %s=%s does not name NodeIPPool %s", AnnotationPools, raw, poolName)
		}
		return nil
	}

	namespace, err := api.GetNamespace(ctx, ns)
	switch {
	case kube.IsNotFound(err):
		return nil // no namespace, no default
	case kube.IsForbidden(err):
		return newErr(ErrAPI, MsgAPI,
			"reading namespace %s (for its %s): %v: the plugin's identity lacks the permission get namespaces (add verbs [get] on resource namespaces to its ClusterRole)",
			ns, AnnotationDefaultPools, err)
	case err != nil:
		return apiFailure(err, "reading namespace "+ns+" (for its "+AnnotationDefaultPools+")")
	}
	raw, ok := namespace.Metadata.Annotations[AnnotationDefaultPools]
	if !ok {
		return nil
	}
	source := "namespace " + ns + " annotation " + AnnotationDefaultPools
	list := parsePoolList(raw, source)
	if list.problem != "" {
		return newErr(ErrTenancy, MsgTenancy, "%s", list.problem)
	}
	if !slices.Contains(list.names, poolName) {
		return newErr(ErrTenancy, MsgTenancy, "%s=%s does not name NodeIPPool %s", source, raw, poolName)
	}
	return nil
}

// checkPoolNamespaces is rule 1 alone: the pool's spec.namespaces (absent:
// any) holds the pod's namespace ns, else ErrTenancy in the scheduler's words.
func checkPoolNamespaces(ns string, pool *kube.NodeIPPool, poolName string) error {
	if allowed := pool.Spec.Namespaces; allowed != nil && !slices.Contains(allowed, ns) {
		sorted := slices.Clone(allowed)
		slices.Sort(sorted)
		sorted = slices.Compact(sorted)
		return newErr(ErrTenancy, MsgTenancy, "NodeIPPool %s is reserved for namespaces %s (spec.namespaces), not %s",
			poolName, strings.Join(sorted, ", "), ns)
	}
	return nil
}

// pyIsSpace is Python's str.isspace for one character (what str.strip
// removes): Go's unicode.IsSpace plus the separators U+001C..U+001F.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f
}

// pyRepr quotes s as Python's repr does (the scheduler's messages use
// {raw!r}): single quotes unless s holds a single quote and no double one,
// backslash escapes for the quote, backslashes and unprintable characters.
func pyRepr(s string) string {
	quote := '\''
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		quote = '"'
	}
	var b strings.Builder
	b.WriteRune(quote)
	for _, r := range s {
		switch {
		case r == quote || r == '\\':
			b.WriteRune('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteRune(quote)
	return b.String()
}

// Command olm-bundle-validate loads an OLM registry+v1 bundle directory (manifests/ and
// metadata/annotations.yaml) with the operator-framework API module and runs its bundle
// validators plus the OperatorHub, capability, good-practice and removed-API checks.
//
// Usage: olm-bundle-validate -k8s-version 1.30.0 BUNDLE_DIR
//
// Every finding is printed as "LEVEL TYPE field: detail" on stdout. Exit status: 0 no
// errors (warnings allowed unless -strict), 1 errors found, 2 the bundle could not be loaded.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
)

func main() {
	k8sVersion := flag.String("k8s-version", "", "the Kubernetes version the removed-API check measures against")
	strict := flag.Bool("strict", false, "treat warnings as errors")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: olm-bundle-validate [-k8s-version V] [-strict] BUNDLE_DIR")
		os.Exit(2)
	}

	bundle, err := manifests.GetBundleFromDir(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "load bundle: %v\n", err)
		os.Exit(2)
	}

	validators := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCapabilitiesValidator,
		validation.StandardCategoriesValidator,
		validation.GoodPracticesValidator,
		validation.AlphaDeprecatedAPIsValidator,
		validation.ObjectValidator,
	)
	objects := append(bundle.ObjectsToValidate(), map[string]string{"k8s-version": *k8sVersion})

	failed := false
	for _, result := range validators.Validate(objects...) {
		for _, finding := range append(result.Errors, result.Warnings...) {
			fmt.Printf("%s %s %s: %s\n", finding.Level, finding.Type, finding.Field, finding.Detail)
			if finding.Level == errors.LevelError || *strict {
				failed = true
			}
		}
	}
	if failed {
		os.Exit(1)
	}
	fmt.Printf("bundle %s valid\n", bundle.Name)
}

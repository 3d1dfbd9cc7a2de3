// Package bench is a separate module that measures and cross-checks the
// inputschema validator against general JSON Schema implementations.
//
// It lives in its own module so that the product module keeps no third-party
// dependencies: the peers (santhosh-tekuri/jsonschema, google/jsonschema-go)
// and the property-testing library (rapid) are needed only here.
//
//   - differential_test.go generates random schemas inside the supported
//     subset and random arguments near them, and checks that inputschema and a
//     complete JSON Schema 2020-12 validator agree on every verdict.
//   - bench_test.go times validation of decoded arguments and of raw JSON
//     bytes on realistic tool fixtures (fixtures.go).
//
// The package itself holds only the shared fixtures.
package bench

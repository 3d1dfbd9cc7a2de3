module github.com/agentbackplane/backplane/bench

go 1.26.0

replace github.com/agentbackplane/backplane => ../

require (
	github.com/agentbackplane/backplane v0.0.0-00010101000000-000000000000
	github.com/google/jsonschema-go v0.4.3
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	pgregory.net/rapid v1.3.0
)

require golang.org/x/text v0.43.0 // indirect

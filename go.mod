module github.com/agentbackplane/backplane

go 1.26

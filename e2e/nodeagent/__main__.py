"""Entry point: python -m nodeagent (started by `localkube up`)."""

from nodeagent import agent

if __name__ == "__main__":
    agent.main()

agg-1m
	AGENTS.md/ws/AGENTS.md@hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh (R
	be kinder•
skills/pdf/SKILL.md/ws/skills/pdf/SKILL.md@hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh (:­ìQ±„Ç¼U)ƒï_²á[ÐgeK«»ˆ<›‹º\«
	.mcp.json/ws/.mcp.json@hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh (2'mcpServers.bad: neither command nor url: Sä5m6¨˜Ô®1þskÙˆ>lhWA5ÒvV+#Š
mcp_server:fs/ws/mcp_server:fs@hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh (: Í:¥IeSûþ'çê{CÜ}^ µé.ÃJö¤Hìvð 2run-1:@
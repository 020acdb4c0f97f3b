DROP TABLE page_sessions;
DROP TABLE page_links;

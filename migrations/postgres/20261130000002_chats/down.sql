DROP TABLE chat_context_resources;
DROP TABLE chats;
